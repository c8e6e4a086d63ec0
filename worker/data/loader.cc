#include "worker/data/loader.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "base/alt_signal_stack.h"
#include "base/mix64.h"
#include "spdlog/spdlog.h"
#include "worker/data/decode.h"
#include "worker/data/transforms.h"

namespace dtrun::data {
namespace {

// Synthetic pixels: a label-dependent colour with per-sample noise (learnable, cheap).
void SyntheticPixels(int label, std::mt19937_64& rng, int size, uint8_t* dst) {
  const uint8_t base[3] = {static_cast<uint8_t>(37 * label), static_cast<uint8_t>(91 * label + 40),
                           static_cast<uint8_t>(151 * label + 80)};
  for (int i = 0; i < size * size; ++i) {
    uint64_t r = rng();
    for (int c = 0; c < 3; ++c) dst[i * 3 + c] = static_cast<uint8_t>(base[c] + static_cast<int>((r >> (8 * c)) & 31));
  }
}

}  // namespace

Loader::Loader(const Dataset& dataset, LoaderOptions options) : dataset_(dataset), options_(options) {
  // spdlog's registry is made on first use; make it here, before the threads that log can race to
  // (libspdlog is not built with TSan, which would see two threads writing it).
  spdlog::default_logger_raw();
  for (int t = 0; t < std::max(1, options_.threads); ++t) threads_.emplace_back([this] { Work(); });
}

Loader::~Loader() {
  {
    CheckedMutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

size_t Loader::batches_per_epoch() const {
  const size_t b = static_cast<size_t>(options_.batch_size);
  return (indices_.size() + b - 1) / b;
}

void Loader::StartEpoch(int64_t epoch, size_t start_batch) {
  std::vector<size_t> indices = DistributedIndices(dataset_.size(), epoch, options_.sampler);
  CheckedMutexLock lock(&mu_);
  indices_ = std::move(indices);
  epoch_ = epoch;
  ++generation_;
  ready_.clear();
  end_ = batches_per_epoch();
  next_to_build_ = next_to_deliver_ = std::min(start_batch, end_);
}

bool Loader::CanProduce() const {
  return stopping_ || (next_to_build_ < end_ &&
                       next_to_build_ < next_to_deliver_ + static_cast<size_t>(options_.max_batches_ahead));
}

void Loader::SetHandOnShare(double share) { hand_on_share_.store(std::clamp(share, 0.0, 1.0)); }

bool Loader::HandsOn(int64_t epoch, size_t index) const {
  const double share = hand_on_share_.load(std::memory_order_relaxed);
  if (share >= 1) return true;
  // A hash of (seed, epoch, index): independent of the augmentation's generator.
  const uint64_t z = Mix64(options_.seed ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull) ^
                           (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull));
  return static_cast<double>(z >> 11) * 0x1.0p-53 < share;
}

bool Loader::HasNext() const { return next_to_deliver_ >= end_ || ready_.count(next_to_deliver_) > 0; }

void Loader::Work() {
  UseAlternateSignalStackOnThisThread();  // a decoder's crash on a hostile image is reported
  // Below the compute threads: an OpenMP region stalls until its slowest thread runs, so a loader
  // thread should yield the core to them rather than preempt one. (Best effort: may be refused.)
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  for (;;) {
    int64_t epoch;
    size_t batch;
    uint64_t generation;
    std::vector<size_t> slice;
    {
      CheckedMutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return CanProduce(); });
      if (stopping_) return;
      epoch = epoch_;
      generation = generation_;
      batch = next_to_build_++;
      const size_t b = static_cast<size_t>(options_.batch_size);
      const size_t lo = batch * b, hi = std::min(indices_.size(), lo + b);
      slice.assign(indices_.begin() + lo, indices_.begin() + hi);
    }
    Batch built = Build(epoch, batch, slice);
    CheckedMutexLock lock(&mu_);
    if (generation == generation_) ready_.emplace(batch, std::move(built));
  }
}

std::optional<Batch> Loader::Next() {
  CheckedMutexLock lock(&mu_);
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return HasNext(); });
  if (next_to_deliver_ >= end_) return std::nullopt;
  auto it = ready_.find(next_to_deliver_);
  Batch b = std::move(it->second);
  ready_.erase(it);
  ++next_to_deliver_;
  return b;
}

absl::Status DecodeAndCrop(Decoder& decoder, std::string_view bytes, const Box& box, bool flip, int size,
                           uint8_t* dst) {
  double scale = 1;
  absl::StatusOr<ImageRegion> img = decoder.DecodeForResize(bytes, box, size, size, &scale);
  if (!img.ok()) return img.status();
  const Box scaled{box.x * scale, box.y * scale, box.w * scale, box.h * scale};
  ResizeCrop(*img, scaled, size, size, flip, dst);
  return absl::OkStatus();
}

Batch Loader::Build(int64_t epoch, size_t batch, const std::vector<size_t>& indices) {
  const auto start = std::chrono::steady_clock::now();
  const int s = options_.image_size;
  const size_t image_bytes = static_cast<size_t>(s) * s * 3;
  const int64_t hand_on_limit = options_.hand_on_jpegs_up_to_pixels;
  Batch out;
  out.epoch = epoch;
  out.index = batch;
  out.image_size = s;
  out.pixels.resize(indices.size() * image_bytes);
  size_t decoded = 0;  // images in out.pixels
  thread_local Decoder decoder(options_.max_image_pixels);  // loader threads serve one Loader
  for (size_t index : indices) {
    // Randomness per (seed, epoch, sample): independent of which thread builds the batch.
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(epoch) << 40) ^ index);
    uint8_t* dst = out.pixels.data() + decoded * image_bytes;
    if (dataset_.synthetic()) {
      SyntheticPixels(dataset_.label(index), rng, s, dst);
    } else {
      absl::StatusOr<std::string> bytes = dataset_.ReadBytes(index);
      absl::StatusOr<ImageInfo> info = bytes.ok() ? decoder.Info(*bytes) : absl::StatusOr<ImageInfo>(bytes.status());
      absl::Status st = info.status();
      if (info.ok()) {
        const Box box = options_.train ? RandomResizedCropBox(info->width, info->height, rng)
                                       : CenterCropBox(info->width, info->height,
                                                       static_cast<int>(std::lround(s * 256.0 / 224.0)), s);
        const bool flip = options_.train && (rng() & 1);
        if (info->plain_ycbcr && int64_t{info->width} * info->height <= hand_on_limit && HandsOn(epoch, index)) {
          out.encoded.push_back(EncodedSample{out.count, std::move(*bytes), info->width, info->height, box, flip});
          out.labels.push_back(dataset_.label(index));
          ++out.count;
          continue;
        }
        const auto decode_start = std::chrono::steady_clock::now();
        st = DecodeAndCrop(decoder, *bytes, box, flip, s, dst);
        out.decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - decode_start).count();
      }
      if (!st.ok()) {
        ++out.skipped;
        ++skipped_total_;
        spdlog::warn("skipping {}: {}", dataset_.Describe(index), std::string(st.message()));
        continue;
      }
    }
    if (hand_on_limit > 0) out.pixel_slots.push_back(out.count);
    ++decoded;
    out.labels.push_back(dataset_.label(index));
    ++out.count;
  }
  out.pixels.resize(decoded * image_bytes);
  if (out.encoded.empty()) out.pixel_slots.clear();
  out.work_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace dtrun::data
