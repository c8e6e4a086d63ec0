#include "worker/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "worker/data/resample_rows.h"

namespace dtrun::data {

Box RandomResizedCropBox(int width, int height, std::mt19937_64& rng, const RandomResizedCropOptions& o) {
  const double area = static_cast<double>(width) * height;
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double log_lo = std::log(o.ratio_min), log_hi = std::log(o.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * (o.scale_min + (o.scale_max - o.scale_min) * uni(rng));
    double ratio = std::exp(log_lo + (log_hi - log_lo) * uni(rng));
    int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      int i = std::uniform_int_distribution<int>(0, height - h)(rng);
      int j = std::uniform_int_distribution<int>(0, width - w)(rng);
      return Box{static_cast<double>(j), static_cast<double>(i), static_cast<double>(w), static_cast<double>(h)};
    }
  }
  // Fallback: whole image cropped to the allowed ratio range, centred.
  double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < o.ratio_min) {
    h = static_cast<int>(std::lround(w / o.ratio_min));
  } else if (in_ratio > o.ratio_max) {
    w = static_cast<int>(std::lround(h * o.ratio_max));
  }
  return Box{(width - w) / 2.0, (height - h) / 2.0, static_cast<double>(w), static_cast<double>(h)};
}

Box CenterCropBox(int width, int height, int resize_to, int crop) {
  // Resize: shorter side → resize_to (torchvision truncates the longer side).
  double s = static_cast<double>(resize_to) / std::min(width, height);
  double rw = width <= height ? resize_to : std::floor(width * s);
  double rh = height < width ? resize_to : std::floor(height * s);
  double sx = width / rw, sy = height / rh;
  double top = std::round((rh - crop) / 2.0), left = std::round((rw - crop) / 2.0);
  return Box{left * sx, top * sy, crop * sx, crop * sy};
}

namespace {

// One axis of the filter: the source samples per output and the triangle's half-width.
struct Resampling {
  double scale;
  double support;
  int max_taps;
};

Resampling ResamplingOf(double extent, int out_size) {
  const double scale = extent / out_size;
  const double support = std::max(1.0, scale);
  return Resampling{scale, support, static_cast<int>(std::ceil(support)) * 2 + 1};
}

// The source samples [lo, end) that output `o`, centred at `center`, reads (end <= lo: none).
struct TapSpan {
  double center;
  int lo;
  int end;
};

TapSpan SpanOf(const Resampling& r, double offset, int in_size, int o) {
  const double center = offset + (o + 0.5) * r.scale;
  const int lo = std::clamp(static_cast<int>(std::floor(center - r.support)), 0, in_size - 1);
  const int hi = std::min(in_size, static_cast<int>(std::ceil(center + r.support)));
  return TapSpan{center, lo, std::min(hi, lo + r.max_taps)};
}

}  // namespace

ResampleTaps ComputeResampleTaps(double offset, double extent, int in_size, int out_size) {
  ResampleTaps t;
  const Resampling r = ResamplingOf(extent, out_size);
  t.max_taps = r.max_taps;
  t.start.resize(out_size);
  t.count.resize(out_size);
  t.weight.assign(static_cast<size_t>(out_size) * t.max_taps, 0.f);
  for (int o = 0; o < out_size; ++o) {
    const auto [center, lo, end] = SpanOf(r, offset, in_size, o);
    double total = 0;
    int n = 0;
    for (int i = lo; i < end; ++i, ++n) {
      double w = std::max(0.0, 1.0 - std::abs((i + 0.5 - center) / r.support));
      t.weight[o * t.max_taps + n] = static_cast<float>(w);
      total += w;
    }
    if (total > 0) {
      for (int k = 0; k < n; ++k) t.weight[o * t.max_taps + k] /= static_cast<float>(total);
    }
    t.start[o] = lo;
    t.count[o] = n;
  }
  return t;
}

void ResizeCrop(const Image& src, const Box& box, int out_w, int out_h, bool flip, uint8_t* dst) {
  ResizeCrop(ImageRegion::Whole(src), box, out_w, out_h, flip, dst);
}

PixelRect PixelsRead(const Box& box, int width, int height, int out_w, int out_h) {
  // Spans rise with the output index (a tap's window slides with its centre): the first output's
  // start and the last one's end bound them all. No taps computed: this runs once an image.
  const Resampling rx = ResamplingOf(box.w, out_w), ry = ResamplingOf(box.h, out_h);
  const TapSpan left = SpanOf(rx, box.x, width, 0), right = SpanOf(rx, box.x, width, out_w - 1);
  const TapSpan top = SpanOf(ry, box.y, height, 0), bottom = SpanOf(ry, box.y, height, out_h - 1);
  return PixelRect{left.lo, top.lo, std::max({left.lo + 1, right.lo, right.end}),
                   std::max({top.lo + 1, bottom.lo, bottom.end})};
}

void ResizeCrop(const ImageRegion& src, const Box& box, int out_w, int out_h, bool flip, uint8_t* dst) {
  // The taps of the whole image, so that a part gives the same bytes as the whole.
  const ResampleTaps tx = ComputeResampleTaps(box.x, box.w, src.full_width, out_w);
  const ResampleTaps ty = ComputeResampleTaps(box.y, box.h, src.full_height, out_h);
  FastestRowResampler().run(src, tx, ty, flip, dst);
}

}  // namespace dtrun::data
