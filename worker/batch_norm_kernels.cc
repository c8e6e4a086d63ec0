#include "worker/batch_norm_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

// One build, each CPU's widest vectors: GCC compiles the loops once per target and picks at load.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DTRUN_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DTRUN_VECTOR_CLONES
#endif

namespace dtrun::worker::kernels {
namespace {

// Elements as float: float itself, or bfloat16 as its 16 high bits.
inline float Load(const float* p, int64_t i) { return p[i]; }
inline float Load(const uint16_t* p, int64_t i) {
  uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline void Store(float* p, int64_t i, float v) { p[i] = v; }
inline void Store(uint16_t* p, int64_t i, float v) {  // round to nearest even, as PyTorch does
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  p[i] = static_cast<uint16_t>(bits >> 16);
}

// dy where the ReLU passed its input (y > 0), else 0. y is a ReLU output, so never negative:
// "y > 0" is "y's bits are not zero", an integer select that vectorises for bfloat16 too.
inline float MaskedLoad(const float* dy, const float* y, int64_t i) { return y[i] > 0.f ? dy[i] : 0.f; }
inline float MaskedLoad(const uint16_t* dy, const uint16_t* y, int64_t i) {
  const uint16_t bits = dy[i] & static_cast<uint16_t>(-static_cast<uint16_t>(y[i] != 0));
  return Load(&bits, 0);
}

// Rows split into one contiguous range per thread; fn(range index, begin, end).
template <typename Fn>
int64_t ForEachRowRange(int64_t rows, Fn fn) {
  const int64_t ranges = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
  at::parallel_for(0, ranges, 1, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) fn(r, rows * r / ranges, rows * (r + 1) / ranges);
  });
  return ranges;
}

// Two per-channel sums over rows [begin, end): terms(i) gives the pair of terms for element i.
// Partial sums in float over short row blocks (fast, vectorised) are folded into float64 per
// block, so long reductions keep their precision.
constexpr int64_t kBlockRows = 64;

template <typename Terms>
inline void ChannelSums(int64_t begin, int64_t end, int64_t channels, Terms terms, double* __restrict s1,
                        double* __restrict s2) {
  std::vector<float> b1(channels), b2(channels);
  for (int64_t block = begin; block < end; block += kBlockRows) {
    std::fill(b1.begin(), b1.end(), 0.f);
    std::fill(b2.begin(), b2.end(), 0.f);
    float* __restrict p1 = b1.data();
    float* __restrict p2 = b2.data();
    for (int64_t r = block; r < std::min(end, block + kBlockRows); ++r) {
      const int64_t row = r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const auto [t1, t2] = terms(row + c, c);
        p1[c] += t1;
        p2[c] += t2;
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      s1[c] += p1[c];
      s2[c] += p2[c];
    }
  }
}

// Σ(x − shift) and Σ(x − shift)².
template <typename T>
DTRUN_VECTOR_CLONES void ShiftedSums(const T* __restrict x, int64_t begin, int64_t end, int64_t channels,
                                     const float* __restrict shift, double* s1, double* s2) {
  ChannelSums(begin, end, channels, [&](int64_t i, int64_t c) {
    const float v = Load(x, i) - shift[c];
    return std::pair<float, float>(v, v * v);
  }, s1, s2);
}

template <typename T>
DTRUN_VECTOR_CLONES void ScaleShiftReluRows(const T* __restrict x, const T* __restrict residual, T* __restrict y,
                                            int64_t begin, int64_t end, int64_t channels,
                                            const float* __restrict center, const float* __restrict scale,
                                            const float* __restrict shift) {
  for (int64_t r = begin; r < end; ++r) {
    const int64_t row = r * channels;
    if (residual != nullptr) {
      for (int64_t c = 0; c < channels; ++c) {
        const float v = (Load(x, row + c) - center[c]) * scale[c] + shift[c] + Load(residual, row + c);
        Store(y, row + c, std::max(0.f, v));
      }
    } else {
      for (int64_t c = 0; c < channels; ++c) {
        Store(y, row + c, std::max(0.f, (Load(x, row + c) - center[c]) * scale[c] + shift[c]));
      }
    }
  }
}

// Σg and Σg·(x − center) with g = dy·(y > 0); g also written to g_out when not null.
template <typename T>
DTRUN_VECTOR_CLONES void MaskedGradSumsRows(const T* __restrict dy, const T* __restrict y, const T* __restrict x,
                                            T* __restrict g_out, int64_t begin, int64_t end, int64_t channels,
                                            const float* __restrict center, double* sum_g, double* sum_gx) {
  ChannelSums(begin, end, channels, [&](int64_t i, int64_t c) {
    const float g = MaskedLoad(dy, y, i);
    if (g_out != nullptr) Store(g_out, i, g);
    return std::pair<float, float>(g, g * (Load(x, i) - center[c]));
  }, sum_g, sum_gx);
}

template <typename T>
DTRUN_VECTOR_CLONES void AffineMaskedGradRows(const T* __restrict dy, const T* __restrict y, const T* __restrict x,
                                              T* __restrict dx, int64_t begin, int64_t end, int64_t channels,
                                              const float* __restrict center, const float* __restrict a,
                                              const float* __restrict b, const float* __restrict c0) {
  for (int64_t r = begin; r < end; ++r) {
    const int64_t row = r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float g = MaskedLoad(dy, y, row + c);
      Store(dx, row + c, a[c] * g + b[c] * (Load(x, row + c) - center[c]) + c0[c]);
    }
  }
}

// Sums per-range partial results (ranges × channels) into out.
void FoldPartials(const std::vector<double>& partial, int64_t ranges, int64_t channels, double* out) {
  std::fill(out, out + channels, 0.0);
  for (int64_t r = 0; r < ranges; ++r) {
    for (int64_t c = 0; c < channels; ++c) out[c] += partial[r * channels + c];
  }
}

template <typename T>
void ChannelMeanVarT(const T* x, int64_t rows, int64_t channels, double* mean, double* var) {
  // Shifting by the first row keeps E[v²] − E[v]² from cancelling when |mean| ≫ std.
  std::vector<float> shift(channels);
  for (int64_t c = 0; c < channels; ++c) shift[c] = Load(x, c);
  const int64_t max_ranges = std::max<int64_t>(1, at::get_num_threads());
  std::vector<double> s1(max_ranges * channels), s2(max_ranges * channels);
  const int64_t ranges = ForEachRowRange(rows, [&](int64_t i, int64_t begin, int64_t end) {
    ShiftedSums(x, begin, end, channels, shift.data(), &s1[i * channels], &s2[i * channels]);
  });
  std::vector<double> t1(channels), t2(channels);
  FoldPartials(s1, ranges, channels, t1.data());
  FoldPartials(s2, ranges, channels, t2.data());
  for (int64_t c = 0; c < channels; ++c) {
    const double m = t1[c] / rows;
    mean[c] = shift[c] + m;
    var[c] = std::max(0.0, t2[c] / rows - m * m);
  }
}

template <typename T>
void MaskedGradSumsT(const T* dy, const T* y, const T* x, T* g_out, int64_t rows, int64_t channels,
                     const float* center, double* sum_g, double* sum_gx) {
  const int64_t max_ranges = std::max<int64_t>(1, at::get_num_threads());
  std::vector<double> s1(max_ranges * channels), s2(max_ranges * channels);
  const int64_t ranges = ForEachRowRange(rows, [&](int64_t i, int64_t begin, int64_t end) {
    MaskedGradSumsRows(dy, y, x, g_out, begin, end, channels, center, &s1[i * channels], &s2[i * channels]);
  });
  FoldPartials(s1, ranges, channels, sum_g);
  FoldPartials(s2, ranges, channels, sum_gx);
}

}  // namespace

void ChannelMeanVar(const void* x, Element type, int64_t rows, int64_t channels, double* mean, double* var) {
  if (type == Element::kFloat32) return ChannelMeanVarT(static_cast<const float*>(x), rows, channels, mean, var);
  ChannelMeanVarT(static_cast<const uint16_t*>(x), rows, channels, mean, var);
}

void ScaleShiftRelu(const void* x, const void* residual, void* y, Element type, int64_t rows, int64_t channels,
                    const float* center, const float* scale, const float* shift) {
  ForEachRowRange(rows, [&](int64_t, int64_t begin, int64_t end) {
    if (type == Element::kFloat32) {
      ScaleShiftReluRows(static_cast<const float*>(x), static_cast<const float*>(residual), static_cast<float*>(y),
                         begin, end, channels, center, scale, shift);
    } else {
      ScaleShiftReluRows(static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(residual),
                         static_cast<uint16_t*>(y), begin, end, channels, center, scale, shift);
    }
  });
}

void MaskedGradSums(const void* dy, const void* y, const void* x, void* g_out, Element type, int64_t rows,
                    int64_t channels, const float* center, double* sum_g, double* sum_gx) {
  if (type == Element::kFloat32) {
    return MaskedGradSumsT(static_cast<const float*>(dy), static_cast<const float*>(y), static_cast<const float*>(x),
                           static_cast<float*>(g_out), rows, channels, center, sum_g, sum_gx);
  }
  MaskedGradSumsT(static_cast<const uint16_t*>(dy), static_cast<const uint16_t*>(y), static_cast<const uint16_t*>(x),
                  static_cast<uint16_t*>(g_out), rows, channels, center, sum_g, sum_gx);
}

void AffineMaskedGrad(const void* dy, const void* y, const void* x, void* dx, Element type, int64_t rows,
                      int64_t channels, const float* center, const float* a, const float* b, const float* c) {
  ForEachRowRange(rows, [&](int64_t, int64_t begin, int64_t end) {
    if (type == Element::kFloat32) {
      AffineMaskedGradRows(static_cast<const float*>(dy), static_cast<const float*>(y), static_cast<const float*>(x),
                           static_cast<float*>(dx), begin, end, channels, center, a, b, c);
    } else {
      AffineMaskedGradRows(static_cast<const uint16_t*>(dy), static_cast<const uint16_t*>(y),
                           static_cast<const uint16_t*>(x), static_cast<uint16_t*>(dx), begin, end, channels,
                           center, a, b, c);
    }
  });
}

}  // namespace dtrun::worker::kernels
