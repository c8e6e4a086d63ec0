// torchvision's ImageNet transforms on uint8 RGB images: RandomResizedCrop (same parameter
// sampling), horizontal flip, and the validation resize + centre crop; resampling is an
// antialiased bilinear (triangle) filter like PIL's BILINEAR. Normalisation happens later, once
// per batch. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "worker/data/image.h"

namespace dtrun::data {

struct RandomResizedCropOptions {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

// torchvision.transforms.RandomResizedCrop.get_params: 10 attempts at a random area and log-uniform
// aspect ratio, then a centre crop clamped to the ratio range. Integer box in (w, h) coordinates.
Box RandomResizedCropBox(int width, int height, std::mt19937_64& rng, const RandomResizedCropOptions& o = {});

// Validation: the box that `Resize(resize_to)` (shorter side) + `CenterCrop(crop)` keeps, in the
// original image's coordinates.
Box CenterCropBox(int width, int height, int resize_to, int crop);

// One output axis of the resampler, an antialiased bilinear (triangle) filter: output o is the
// sum over k < count[o] of source sample start[o] + k times weight[o * max_taps + k] (the weights
// sum to 1; those past count[o] are 0). The host's ResizeCrop and the GPU's resize (worker/
// device_batch.h) both use these, so they agree to float rounding.
struct ResampleTaps {
  std::vector<int> start;
  std::vector<int> count;
  std::vector<float> weight;
  int max_taps = 0;
};
// Taps that map `extent` source samples from `offset` onto `out_size` outputs, reading only
// samples in [0, in_size): every start is inside, past the edge a count is short or 0.
ResampleTaps ComputeResampleTaps(double offset, double extent, int in_size, int out_size);

// Resamples `box` of `src` (box in src coordinates) to out_w × out_h into `dst` (HWC, row stride
// out_w * 3), mirrored horizontally if `flip`.
void ResizeCrop(const Image& src, const Box& box, int out_w, int out_h, bool flip, uint8_t* dst);
// The same from a part of an image (box in the whole image's coordinates): the same bytes as from
// the whole image, provided the part holds ResizeCrop's PixelsRead.
void ResizeCrop(const ImageRegion& src, const Box& box, int out_w, int out_h, bool flip, uint8_t* dst);
// Which pixels of a width × height image resampling `box` to out_w × out_h reads: all that a
// decoder needs to decode for it.
PixelRect PixelsRead(const Box& box, int width, int height, int out_w, int out_h);

}  // namespace dtrun::data
