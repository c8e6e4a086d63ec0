#include "worker/data/demo_images.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/checked_mutex.h"
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
  struct Part {
    std::string dir;
    int per_class, cls;
    uint64_t seed;
  };
  std::vector<Part> parts;
  for (const auto& [split, per_class] : {std::make_pair("train", o.train_per_class), std::make_pair("val", o.val_per_class)}) {
    for (int c = 0; c < o.classes; ++c) {
      // One random stream per (seed, split, class): the same images whatever the thread count.
      const uint64_t seed = o.seed * 0x9E3779B97F4A7C15ull + (split[0] == 't' ? 0 : 1u << 20) + static_cast<uint64_t>(c);
      parts.push_back({absl::StrFormat("%s/%s/class%02d", out, split, c), per_class, c, seed});
      std::error_code ec;
      fs::create_directories(parts.back().dir, ec);
      if (ec) return absl::PermissionDeniedError(absl::StrFormat("cannot create %s: %s", parts.back().dir, ec.message()));
    }
  }
  // Classes are drawn and encoded in parallel (ImageNet-sized sets take minutes on one core).
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::max<size_t>(parts.size(), 1));
  std::atomic<size_t> next{0}, written{0};
  CheckedMutex mu;
  absl::Status first_error;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < parts.size();) {
      const Part& p = parts[i];
      std::mt19937_64 rng(p.seed);
      for (int k = 0; k < p.per_class; ++k) {
        absl::StatusOr<std::string> jpeg = EncodeJpeg(DrawSample(p.cls, o.width, o.height, rng), o.quality);
        const std::string path = absl::StrFormat("%s/%05d.jpg", p.dir, k);
        absl::Status st = jpeg.status();
        if (st.ok() && !(std::ofstream(path, std::ios::binary) << *jpeg)) {
          st = absl::DataLossError(absl::StrFormat("cannot write %s (disk full?)", path));
        }
        if (!st.ok()) {
          CheckedMutexLock lock(&mu);
          if (first_error.ok()) first_error = st;
          return;
        }
        ++written;
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (!first_error.ok()) return first_error;
  return written.load();
}

}  // namespace dtrun::data
