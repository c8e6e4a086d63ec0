// torchvision's ImageNet transforms on uint8 RGB images: RandomResizedCrop (same parameter
// sampling), horizontal flip, and the validation resize + centre crop; resampling is an
// antialiased bilinear (triangle) filter like PIL's BILINEAR. Normalisation happens later, once
// per batch. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <random>

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

// Resamples `box` of `src` (box in src coordinates) to out_w × out_h into `dst` (HWC, row stride
// out_w * 3), mirrored horizontally if `flip`.
void ResizeCrop(const Image& src, const Box& box, int out_w, int out_h, bool flip, uint8_t* dst);

}  // namespace dtrun::data
