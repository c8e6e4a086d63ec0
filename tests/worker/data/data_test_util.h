// Test helpers: write small images of every kind the pipeline must cope with.
#pragma once

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <stb_image_write.h>  // libstb-dev (pkg-config stb)
#include "worker/data/dataset.h"
#include "worker/data/encode.h"
#include "worker/data/loader.h"

namespace dtrun::data::testing {

inline Image Noise(int w, int h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  for (auto& p : img.rgb) p = static_cast<uint8_t>(rng());
  return img;
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string Jpeg(int w, int h, uint64_t seed = 1) { return EncodeJpeg(Noise(w, h, seed), 90).value(); }

// A smooth image (gradients and a slow wave): where two decoders or resamplers agree to a level
// or two, unlike noise.
inline Image Smooth(int w, int h, uint64_t seed) {
  Image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  const double phase = static_cast<double>(seed % 97) / 7.0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(255.0 * x / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>(255.0 * y / std::max(1, h - 1));
      p[2] = static_cast<uint8_t>(127.5 + 100 * std::sin(phase + 0.05 * (x + 2 * y)));
    }
  }
  return img;
}

inline std::string SmoothJpeg(int w, int h, uint64_t seed = 1) { return EncodeJpeg(Smooth(w, h, seed), 90).value(); }

// Grey (1 component), CMYK (4 components) or RGB (TJPF_RGBX, at any subsampling) JPEG.
inline std::string JpegWithFormat(int w, int h, int pixel_format, int subsamp) {
  const int channels = pixel_format == TJPF_GRAY ? 1 : 4;
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels, 128);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7);
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  tjCompress2(tj, px.data(), w, 0, h, pixel_format, &out, &size, subsamp, 90, 0);
  std::string s(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return s;
}

inline std::string Png(int w, int h) {
  Image img = Noise(w, h, 3);
  std::string out;
  stbi_write_png_to_func([](void* ctx, void* data, int size) { static_cast<std::string*>(ctx)->append(static_cast<char*>(data), size); },
                         &out, w, h, 3, img.rgb.data(), w * 3);
  return out;
}

// Every batch of `epoch` from a loader with options `o`, from batch `start` on.
inline std::vector<Batch> AllBatches(const Dataset& ds, LoaderOptions o, int64_t epoch, size_t start = 0) {
  Loader loader(ds, o);
  loader.StartEpoch(epoch, start);
  std::vector<Batch> out;
  while (auto b = loader.Next()) out.push_back(std::move(*b));
  return out;
}

}  // namespace dtrun::data::testing
