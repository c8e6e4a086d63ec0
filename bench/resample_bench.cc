// The resampler alone, as the loader runs it: random training crops of one JPEG, each decoded at
// the DCT scale the loader would choose (decoded once, outside the timing), resampled to 224 px by
// every build of the resampler's loops that this CPU runs (worker/data/resample_rows.h), the
// builds taking turns round by round. Prints the median time a crop per build.
//   resample_bench IMAGE.jpg [CROPS=256] [ROUNDS=15]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "worker/data/decode.h"
#include "worker/data/resample_rows.h"
#include "worker/data/transforms.h"

namespace {

using dtrun::data::Box;
using dtrun::data::Image;
using dtrun::data::ImageRegion;
using dtrun::data::ResampleTaps;

struct Crop {
  const Image* image;  // the image at the crop's DCT scale
  Box box;             // in that image's pixels
  bool flip;
};

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: resample_bench IMAGE.jpg [CROPS=256] [ROUNDS=15]\n");
    return 2;
  }
  const int crops = argc > 2 ? std::max(1, std::atoi(argv[2])) : 256;
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 15;
  std::ifstream in(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr int kSize = 224;
  dtrun::data::Decoder decoder;
  const auto info = decoder.Info(bytes);
  if (!info.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[1], std::string(info.status().message()).c_str());
    return 1;
  }
  std::map<double, Image> by_scale;
  std::vector<Crop> list;
  std::mt19937_64 rng(1);
  for (int i = 0; i < crops; ++i) {
    const Box box = dtrun::data::RandomResizedCropBox(info->width, info->height, rng);
    double scale = 1;
    auto img = decoder.Decode(bytes, box, kSize, kSize, &scale);
    if (!img.ok()) return 1;
    const Image& at_scale = by_scale.try_emplace(scale, std::move(*img)).first->second;
    list.push_back(Crop{&at_scale, Box{box.x * scale, box.y * scale, box.w * scale, box.h * scale}, (rng() & 1) != 0});
  }
  const auto builds = dtrun::data::RowResamplersForThisCpu();
  std::vector<std::vector<double>> us_a_crop(builds.size());
  std::vector<uint8_t> out(static_cast<size_t>(kSize) * kSize * 3);
  for (int r = 0; r < rounds; ++r) {
    for (size_t b = 0; b < builds.size(); ++b) {
      const auto start = std::chrono::steady_clock::now();
      for (const Crop& c : list) {
        // As ResizeCrop: the taps, then the loops.
        const ResampleTaps tx = dtrun::data::ComputeResampleTaps(c.box.x, c.box.w, c.image->width, kSize);
        const ResampleTaps ty = dtrun::data::ComputeResampleTaps(c.box.y, c.box.h, c.image->height, kSize);
        builds[b].run(ImageRegion::Whole(*c.image), tx, ty, c.flip, out.data());
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      us_a_crop[b].push_back(1e6 * s / crops);
    }
  }
  for (size_t b = 0; b < builds.size(); ++b) {
    std::printf("build=%s crops=%d rounds=%d median_us_per_crop=%.1f\n", builds[b].isa, crops, rounds,
                MedianOf(us_a_crop[b]));
  }
  return 0;
}
