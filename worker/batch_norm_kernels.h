// CPU kernels behind the fused BatchNorm(+residual)+ReLU (worker/batch_norm_relu.h), on
// channels-last activations seen as a rows × channels matrix (rows = N·H·W). Each is one or two
// passes over memory where ATen's unfused BatchNorm, add and ReLU take about three times as many;
// these layers are memory-bound, so passes are time. No autograd, no tensors: raw buffers.
// Elementwise terms are taken of x − center, center a float per channel near its mean (the float
// mean): where |mean| ≫ std, x·scale + shift would cancel in float32 and x − center is exact.
#pragma once

#include <cstdint>

namespace dtrun::worker::kernels {

enum class Element { kFloat32, kBFloat16 };

// Per-channel mean and biased variance (float64 results).
void ChannelMeanVar(const void* x, Element type, int64_t rows, int64_t channels, double* mean, double* var);

// y = max(0, (x − center)·scale + shift [+ residual]); residual may be null.
void ScaleShiftRelu(const void* x, const void* residual, void* y, Element type, int64_t rows, int64_t channels,
                    const float* center, const float* scale, const float* shift);

// With g = dy·(y > 0): per-channel Σg and Σg·(x − center); also writes g to g_out when it is not
// null (the residual branch's gradient).
void MaskedGradSums(const void* dy, const void* y, const void* x, void* g_out, Element type, int64_t rows,
                    int64_t channels, const float* center, double* sum_g, double* sum_gx);

// dx = a·(dy·(y > 0)) + b·(x − center) + c, per channel.
void AffineMaskedGrad(const void* dy, const void* y, const void* x, void* dx, Element type, int64_t rows,
                      int64_t channels, const float* center, const float* a, const float* b, const float* c);

}  // namespace dtrun::worker::kernels
