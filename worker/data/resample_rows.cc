#include "worker/data/resample_rows.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace dtrun::data {
namespace {

// Four floats as one SSE (or NEON) register: GCC's and clang's vector extensions.
using Float4 = float __attribute__((vector_size(16)));

[[gnu::always_inline]] inline Float4 Load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// out[c] = Σ_k weight[k] · first_row[k · stride + c], from 0 and in k order (the first term is
// assigned: 0 plus a non-negative number is that number). Plain loops: the compiler vectorises
// them for the target it builds this for.
[[gnu::always_inline]] inline void SumRows(const uint8_t* __restrict first_row, ptrdiff_t stride,
                                           const float* __restrict weight, int taps, int n, float* __restrict out) {
  if (taps == 0) {
    std::fill(out, out + n, 0.f);
    return;
  }
  for (int c = 0; c < n; ++c) out[c] = weight[0] * first_row[c];
  for (int k = 1; k < taps; ++k) {
    const float w = weight[k];
    const uint8_t* __restrict row = first_row + k * stride;
    for (int c = 0; c < n; ++c) out[c] += w * row[c];
  }
}

[[gnu::always_inline]] inline void Store4(float* p, Float4 v) { std::memcpy(p, &v, sizeof(v)); }

// Output pixel `ox` from a float row of pixels (three floats each, one more after the last): a
// pixel's three channels are one vector, so a multiply and an add per tap instead of three each,
// each channel summed in the same order as one at a time. Taps past the output's own have weight
// 0 and read zeros: adding 0 times a finite non-negative number changes no bit.
template <int kTaps>
[[gnu::always_inline]] inline Float4 OutputPixel(const float* __restrict row, const ResampleTaps& tx, int x0, int ox) {
  Float4 acc = {0, 0, 0, 0};
  const float* p = row + static_cast<size_t>(tx.start[ox] - x0) * 3;
  const float* w = &tx.weight[static_cast<size_t>(ox) * tx.max_taps];
  if constexpr (kTaps > 0) {
#pragma GCC unroll 16
    for (int k = 0; k < kTaps; ++k) acc += w[k] * Load4(p + 3 * k);
  } else {
    for (int k = 0; k < tx.count[ox]; ++k) acc += w[k] * Load4(p + 3 * k);
  }
  return acc;
}

// One output row: the pixels' sums into `sums` (three floats a pixel, in output order, one float
// more), then all of them rounded, clamped and made bytes in one loop the compiler vectorises.
// kTaps > 0: every output takes that many taps (a loop of fixed length has no branch to
// mispredict); 0: each its own count.
template <int kTaps>
[[gnu::always_inline]] inline void ResampleRow(const float* __restrict row, const ResampleTaps& tx, int x0, bool flip,
                                               float* __restrict sums, uint8_t* __restrict out) {
  const int out_w = static_cast<int>(tx.start.size());
  // In ascending order of where they go: each store's fourth float is the next one's first.
  for (int at = 0; at < out_w; ++at) Store4(sums + 3 * at, OutputPixel<kTaps>(row, tx, x0, flip ? out_w - 1 - at : at));
  for (int i = 0; i < out_w * 3; ++i) out[i] = static_cast<uint8_t>(std::clamp(sums[i] + 0.5f, 0.f, 255.f));
}

[[gnu::always_inline]] inline void ResampleRows(const ImageRegion& src, const ResampleTaps& tx, const ResampleTaps& ty,
                                                bool flip, uint8_t* dst) {
  const int out_w = static_cast<int>(tx.start.size()), out_h = static_cast<int>(ty.start.size());
  // Only the source columns the taps read.
  const int x0 = tx.start.front();
  const int cols = std::max(1, tx.start.back() + tx.count.back() - x0);
  // Zeros after the columns: ResampleRow's padded taps, and the fourth float of the last pixel.
  std::vector<float> row((static_cast<size_t>(cols) + tx.max_taps) * 3 + 1, 0.f);
  const ptrdiff_t stride = static_cast<ptrdiff_t>(src.width) * 3;
  const uint8_t* column0 = src.data + static_cast<ptrdiff_t>(x0 - src.x0) * 3;
  std::vector<float> sums(static_cast<size_t>(out_w) * 3 + 1);
  for (int oy = 0; oy < out_h; ++oy) {
    SumRows(column0 + (ty.start[oy] - src.y0) * stride, stride, &ty.weight[static_cast<size_t>(oy) * ty.max_taps],
            ty.count[oy], cols * 3, row.data());
    uint8_t* out = dst + static_cast<size_t>(oy) * out_w * 3;
    switch (tx.max_taps) {  // 2 ⌈support⌉ + 1: downscales of up to 4x
      case 3:
        ResampleRow<3>(row.data(), tx, x0, flip, sums.data(), out);
        break;
      case 5:
        ResampleRow<5>(row.data(), tx, x0, flip, sums.data(), out);
        break;
      case 7:
        ResampleRow<7>(row.data(), tx, x0, flip, sums.data(), out);
        break;
      case 9:
        ResampleRow<9>(row.data(), tx, x0, flip, sums.data(), out);
        break;
      default:
        ResampleRow<0>(row.data(), tx, x0, flip, sums.data(), out);
    }
  }
}

void ResampleRowsPortable(const ImageRegion& src, const ResampleTaps& tx, const ResampleTaps& ty, bool flip,
                          uint8_t* dst) {
  ResampleRows(src, tx, ty, flip, dst);
}

#if defined(__x86_64__)
// The same loops on wider vectors. No fused multiply-add (this file is built with
// -ffp-contract=off): it would round once where the portable build rounds twice.
[[gnu::target("avx2")]] void ResampleRowsAvx2(const ImageRegion& src, const ResampleTaps& tx, const ResampleTaps& ty,
                                              bool flip, uint8_t* dst) {
  ResampleRows(src, tx, ty, flip, dst);
}
[[gnu::target("avx512f,avx512bw,avx512vl")]] void ResampleRowsAvx512(const ImageRegion& src, const ResampleTaps& tx,
                                                                     const ResampleTaps& ty, bool flip, uint8_t* dst) {
  ResampleRows(src, tx, ty, flip, dst);
}
#endif

}  // namespace

std::vector<RowResampler> RowResamplersForThisCpu() {
  std::vector<RowResampler> builds = {{"portable", &ResampleRowsPortable}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) builds.push_back({"avx2", &ResampleRowsAvx2});
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    builds.push_back({"avx512", &ResampleRowsAvx512});
#endif
  return builds;
}

const RowResampler& FastestRowResampler() {
  static const RowResampler fastest = RowResamplersForThisCpu().back();
  return fastest;
}

}  // namespace dtrun::data
