// The resampler's inner loops (ResizeCrop, transforms.h), built for any CPU and, on x86-64, again
// for AVX2 and for AVX-512; the widest the CPU runs is taken at run time. Every build gives the
// same bytes: each output is summed tap by tap in one order, a multiply and then an add (never
// fused), whatever the width of the vectors doing it.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/data/image.h"
#include "worker/data/transforms.h"

namespace dtrun::data {

// Resamples rows of `src` to out_h × tx.start.size() pixels at `dst` (row stride out_w * 3),
// mirrored if `flip`: for each output row, ty's taps of the source rows summed into a float row
// of the columns tx reads, then tx's taps of that row per channel, plus 0.5, clamped to [0, 255]
// and truncated. `src` holds every pixel the taps read.
using ResampleRowsFn = void (*)(const ImageRegion& src, const ResampleTaps& tx, const ResampleTaps& ty, bool flip,
                                uint8_t* dst);

struct RowResampler {
  const char* isa;  // "portable", "avx2", "avx512"
  ResampleRowsFn run;
};

// The builds this CPU can run, the portable one first.
std::vector<RowResampler> RowResamplersForThisCpu();
// The widest of them: what ResizeCrop uses.
const RowResampler& FastestRowResampler();

}  // namespace dtrun::data
