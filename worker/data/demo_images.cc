#include "worker/data/demo_images.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_format.h"
#include "worker/data/encode.h"

namespace dtrun::data {
namespace {

// True if (x, y), relative to the shape's centre and radius r, lies inside shape `kind`.
bool Inside(int kind, double dx, double dy, double r) {
  const double d = std::hypot(dx, dy);
  switch (kind) {
    case 0: return d <= r;                                          // disc
    case 1: return std::abs(dx) <= r * 0.8 && std::abs(dy) <= r * 0.8;  // square
    case 2: return dy <= r * 0.7 && dy >= -r + 1.7 * std::abs(dx);  // triangle
    case 3: return std::abs(dx) <= r * 0.25 || std::abs(dy) <= r * 0.25 ? d <= r : false;  // cross
    default: return d <= r && d >= r * 0.55;                        // ring
  }
}

Image DrawSample(int cls, int w, int h, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  Image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  const int kind = cls % 5;
  const bool warm = cls / 5 % 2 == 0;
  const double r = std::min(w, h) * (0.18 + 0.15 * u(rng));
  const double cx = r + u(rng) * (w - 2 * r), cy = r + u(rng) * (h - 2 * r);
  const double jitter = 40 * u(rng);
  const uint8_t color[3] = {static_cast<uint8_t>(warm ? 200 + jitter : 30 + jitter),
                            static_cast<uint8_t>(90 + jitter),
                            static_cast<uint8_t>(warm ? 40 + jitter : 200 + jitter)};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[(static_cast<size_t>(y) * w + x) * 3];
      bool in = Inside(kind, x - cx, y - cy, r);
      uint64_t noise = rng();
      for (int c = 0; c < 3; ++c) {
        int base = in ? color[c] : 110 + static_cast<int>(30 * std::sin((x + y * (c + 1)) * 0.05));
        p[c] = static_cast<uint8_t>(std::clamp(base + static_cast<int>((noise >> (8 * c)) & 63) - 32, 0, 255));
      }
    }
  }
  return img;
}

}  // namespace

absl::StatusOr<size_t> MakeDemoImageFolder(const std::string& out, const DemoOptions& o) {
  namespace fs = std::filesystem;
  std::mt19937_64 rng(o.seed);
  size_t written = 0;
  for (const auto& [split, per_class] : {std::make_pair("train", o.train_per_class), std::make_pair("val", o.val_per_class)}) {
    for (int c = 0; c < o.classes; ++c) {
      std::string dir = absl::StrFormat("%s/%s/class%02d", out, split, c);
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) return absl::PermissionDeniedError(absl::StrFormat("cannot create %s: %s", dir, ec.message()));
      for (int i = 0; i < per_class; ++i) {
        absl::StatusOr<std::string> jpeg = EncodeJpeg(DrawSample(c, o.width, o.height, rng), o.quality);
        if (!jpeg.ok()) return jpeg.status();
        std::ofstream(absl::StrFormat("%s/%05d.jpg", dir, i), std::ios::binary) << *jpeg;
        ++written;
      }
    }
  }
  return written;
}

}  // namespace dtrun::data
