// dtdata: dataset tools for dtrun's input pipeline.
//   dtdata make-demo OUT [--classes 10 --train-per-class 64 --val-per-class 16 --size 160 | --width --height]
//   dtdata pack SRC OUT [--per-shard 1000] [--resize 320]
//   dtdata verify SRC
//   dtdata bench SRC [--threads N] [--batches 20] [--batch-size 32] [--image-size 224]
//   dtdata make-ratings OUT.csv [--users 600 --items 2000 --min-per-user 20 --max-per-user 150 --seed 0]
//   dtdata check-ratings RATINGS.csv
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "CLI/CLI.hpp"
#include "base/build_info.h"
#include "worker/data/dataset.h"
#include "worker/data/decode.h"
#include "worker/data/demo_images.h"
#include "worker/data/loader.h"
#include "worker/data/ratings.h"
#include "worker/data/resample_rows.h"
#include "worker/data/synthetic_ratings.h"
#include "worker/host_memory.h"

namespace dtrun::data {
namespace {

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "dtdata: error: %s\n", std::string(st.message()).c_str());
  return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int Verify(const std::string& src, int64_t max_pixels) {
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(src);
  if (!ds.ok()) return Fail(ds.status());
  Decoder decoder(max_pixels);
  size_t bad = 0;
  for (size_t i = 0; i < (*ds)->size(); ++i) {
    absl::StatusOr<std::string> bytes = (*ds)->ReadBytes(i);
    absl::StatusOr<ImageInfo> info = bytes.ok() ? decoder.Info(*bytes) : absl::StatusOr<ImageInfo>(bytes.status());
    absl::Status st = info.status();
    if (info.ok()) {
      st = decoder.Decode(*bytes, Box{0, 0, double(info->width), double(info->height)}, info->width, info->height)
               .status();
    }
    if (!st.ok()) {
      ++bad;
      std::printf("BAD %s: %s\n", (*ds)->Describe(i).c_str(), std::string(st.message()).c_str());
    }
  }
  std::printf("%zu images, %zu bad\n", (*ds)->size(), bad);
  return bad == 0 ? 0 : 1;
}

// Decode + RandomResizedCrop + flip into uint8 batches, then normalise to float (as
// ToTensor + Normalize would), counting images per second.
// With `hand_on`, JPEGs are left encoded as train_imagenet --gpu-decode leaves them: what the loader's
// threads still do (read, parse the header, draw the crop) when the GPU decodes.
int Bench(const std::string& src, int threads, int batches, int batch_size, int image_size, int64_t max_pixels,
          bool hand_on) {
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(src);
  if (!ds.ok()) return Fail(ds.status());
  LoaderOptions o;
  o.threads = threads;
  o.batch_size = batch_size;
  o.image_size = image_size;
  o.max_batches_ahead = 2 * threads;
  o.max_image_pixels = max_pixels;
  if (hand_on) o.hand_on_jpegs_up_to_pixels = int64_t{4} << 20;  // worker/device_batch.h's bound
  // The memory policy train_imagenet runs its loader under: otherwise each batch's pixels (38.5 MB
  // at 256 x 224 px, above glibc's mmap ceiling) are mapped, faulted in and zeroed afresh, a third of
  // a loader thread's time here, which the trainer never pays.
  dtrun::worker::RetainFreedHostMemory();
  Loader loader(**ds, o);
  std::vector<float> normalised;
  size_t images = 0, handed_on = 0;
  double loader_seconds = 0;  // the loader threads' own time on the batches, not the consumer's
  auto start = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; images < static_cast<size_t>(batches) * batch_size; ++epoch) {
    loader.StartEpoch(epoch);
    while (auto b = loader.Next()) {
      normalised.resize(b->pixels.size());
      float a[3], c[3];
      for (int k = 0; k < 3; ++k) {
        a[k] = 1.f / (255.f * kImageNetStd[k]);
        c[k] = -kImageNetMean[k] / kImageNetStd[k];
      }
      for (size_t i = 0; i + 2 < b->pixels.size(); i += 3) {
        for (int k = 0; k < 3; ++k) normalised[i + k] = b->pixels[i + k] * a[k] + c[k];
      }
      images += b->count;
      handed_on += b->encoded.size();
      loader_seconds += b->work_seconds;
      if (images >= static_cast<size_t>(batches) * batch_size) break;
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // loader_ms_per_image: a loader thread's time per image, so 1000 / it is what one core it has to
  // itself delivers, whatever the consumer (this loop's normalising) takes of the cores. resampler:
  // the build of the resampler's loops this CPU runs (worker/data/resample_rows.h).
  std::printf(
      "threads=%d images=%zu seconds=%.2f images_per_s=%.1f per_thread=%.1f skipped=%lld handed_on=%zu "
      "loader_ms_per_image=%.3f resampler=%s\n",
      threads, images, s, images / s, images / s / threads, static_cast<long long>(loader.skipped_total()), handed_on,
      images > 0 ? 1000 * loader_seconds / images : 0.0, dtrun::data::FastestRowResampler().isa);
  return 0;
}

// Full-size JPEG decode only, one thread: the ceiling a core can reach with libjpeg-turbo.
int DecodeOnlyBench(const std::string& src, int images) {
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(src);
  if (!ds.ok()) return Fail(ds.status());
  std::vector<std::string> files;
  for (size_t i = 0; i < std::min<size_t>((*ds)->size(), 256); ++i) files.push_back((*ds)->ReadBytes(i).value_or(""));
  Decoder decoder;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < images; ++i) {
    const std::string& f = files[i % files.size()];
    absl::StatusOr<ImageInfo> info = decoder.Info(f);
    if (info.ok()) (void)decoder.Decode(f, Box{0, 0, double(info->width), double(info->height)}, info->width, info->height);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("decode-only (full size, 1 thread): images=%d images_per_s=%.1f\n", images, images / s);
  return 0;
}

}  // namespace
}  // namespace dtrun::data

int main(int argc, char** argv) {
  using namespace dtrun::data;
  CLI::App app("dtdata: dataset tools for dtrun", "dtdata");
  app.set_version_flag("--version", dtrun::VersionText("dtdata"));
  app.require_subcommand(1);
  DemoOptions demo;
  std::string out, src;
  int size = 0;
  auto* make = app.add_subcommand("make-demo", "Write a small learnable JPEG ImageFolder (train/ and val/)");
  make->add_option("out", out, "Output folder")->required();
  make->add_option("--classes", demo.classes)->check(CLI::Range(1, 1000))->capture_default_str();
  make->add_option("--train-per-class", demo.train_per_class)->check(CLI::Range(1, 1000000))->capture_default_str();
  make->add_option("--val-per-class", demo.val_per_class)->check(CLI::Range(0, 1000000))->capture_default_str();
  make->add_option("--size", size, "Square images of this side")->check(CLI::Range(16, 4096));
  make->add_option("--width", demo.width)->check(CLI::Range(16, 4096))->capture_default_str();
  make->add_option("--height", demo.height)->check(CLI::Range(16, 4096))->capture_default_str();
  make->add_option("--quality", demo.quality)->check(CLI::Range(1, 100))->capture_default_str();
  make->add_option("--seed", demo.seed)->capture_default_str();
  PackOptions pack_options;
  auto* pack = app.add_subcommand("pack", "ImageFolder -> tar shards with an index");
  pack->add_option("src", src, "ImageFolder root (e.g. data/train)")->required();
  pack->add_option("out", out, "Output folder for the shards")->required();
  pack->add_option("--per-shard", pack_options.samples_per_shard)->check(CLI::Range(1, 10000000))->capture_default_str();
  pack->add_option("--resize", pack_options.resize_shorter_side, "Pre-resize: shorter side in pixels (e.g. 160, 320)")->check(CLI::Range(16, 8192));
  auto* verify = app.add_subcommand("verify", "Decode every image; list the corrupt ones");
  verify->add_option("src", src, "ImageFolder root or shard folder")->required();
  int64_t max_pixels = Decoder::kDefaultMaxPixels;
  const char* pixels_help = "Skip images whose header claims more pixels (untrusted data)";
  verify->add_option("--max-image-pixels", max_pixels, pixels_help)->capture_default_str()->check(CLI::Range(int64_t{1024}, int64_t{1} << 34));
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int batches = 20, batch_size = 32, image_size = 224;
  auto* bench = app.add_subcommand("bench", "Decode + augment images/s");
  bench->add_option("src", src, "ImageFolder root or shard folder")->required();
  bench->add_option("--threads", threads)->check(CLI::Range(1, 1024))->capture_default_str();
  bench->add_option("--batches", batches)->check(CLI::Range(1, 1000000))->capture_default_str();
  bench->add_option("--batch-size", batch_size)->check(CLI::Range(1, 100000))->capture_default_str();
  bench->add_option("--max-image-pixels", max_pixels, pixels_help)->capture_default_str()->check(CLI::Range(int64_t{1024}, int64_t{1} << 34));
  bench->add_option("--image-size", image_size)->check(CLI::Range(16, 4096))->capture_default_str();
  bool decode_only = false;
  bench->add_flag("--decode-only", decode_only, "Only full-size JPEG decoding on one thread (the per-core ceiling)");
  bool hand_on = false;
  bench->add_flag("--hand-on-jpegs", hand_on,
                  "Leave plain JPEGs encoded, as train_imagenet --gpu-decode does: the loader's own work then");
  SyntheticRatingsOptions ratings;
  auto* make_ratings = app.add_subcommand("make-ratings", "Write a synthetic MovieLens-style ratings.csv a model can learn");
  make_ratings->add_option("out", out, "Output CSV (userId,movieId,rating,timestamp)")->required();
  make_ratings->add_option("--users", ratings.users)->check(CLI::Range(1, 10000000))->capture_default_str();
  make_ratings->add_option("--items", ratings.items)->check(CLI::Range(2, 10000000))->capture_default_str();
  make_ratings->add_option("--min-per-user", ratings.min_per_user)->check(CLI::Range(1, 100000))->capture_default_str();
  make_ratings->add_option("--max-per-user", ratings.max_per_user)->check(CLI::Range(1, 100000))->capture_default_str();
  make_ratings->add_option("--noise", ratings.noise, "Rating noise (stars)")->check(CLI::Range(0.0, 5.0))->capture_default_str();
  make_ratings->add_option("--seed", ratings.seed)->capture_default_str();
  auto* check_ratings = app.add_subcommand("check-ratings", "Read a ratings CSV; report its size and malformed lines");
  check_ratings->add_option("src", src, "ratings.csv")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dtdata: error: %s; run dtdata --help\n", e.what());
    return 2;
  }
  if (make->parsed()) {
    if (size > 0) demo.width = demo.height = size;
    absl::StatusOr<size_t> n = MakeDemoImageFolder(out, demo);
    if (!n.ok()) return Fail(n.status());
    std::printf("wrote %zu images to %s/{train,val}\n", *n, out.c_str());
  } else if (pack->parsed()) {
    absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenImageFolder(src);
    if (!ds.ok()) return Fail(ds.status());
    absl::StatusOr<size_t> n = PackShards(**ds, out, pack_options);
    if (!n.ok()) return Fail(n.status());
    std::printf("packed %zu samples into %s\n", *n, out.c_str());
  } else if (verify->parsed()) {
    return Verify(src, max_pixels);
  } else if (make_ratings->parsed()) {
    if (absl::Status st = WriteSyntheticRatings(out, ratings); !st.ok()) return Fail(st);
    absl::StatusOr<RatingsTable> table = ReadRatingsCsv(out);
    if (!table.ok()) return Fail(table.status());
    std::printf("%s\n", table->Summary(out).c_str());
  } else if (check_ratings->parsed()) {
    absl::StatusOr<RatingsTable> table = ReadRatingsCsv(src);
    if (!table.ok()) return Fail(table.status());
    std::printf("%s\n", table->Summary(src).c_str());
    return table->malformed == 0 ? 0 : 1;
  } else if (bench->parsed()) {
    if (decode_only) return DecodeOnlyBench(src, batches * batch_size);
    return Bench(src, threads, batches, batch_size, image_size, max_pixels, hand_on);
  }
  return 0;
}
