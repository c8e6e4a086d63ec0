// The loader's crop and resize (data::ResizeCrop: PIL's antialiased bilinear filter) run on the
// images' device, for JPEGs decoded there (worker/device_batch.h). The filter taps are the host's
// own (data::ComputeResampleTaps), so both give the same pixels to float rounding; fractional
// boxes (validation's centre crop) included. Each axis is a gather of every output's taps and a
// weighted sum in one batched product; a batch's taps travel to the device in one copy.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "worker/data/image.h"

namespace dtrun::worker {

class DeviceResampler {
 public:
  struct Crop {
    int64_t height = 0, width = 0;  // of the whole image
    data::Box box;                  // in its pixel coordinates
  };
  // The taps for resizing each crop to size × size, queued for `device` (from pinned memory: the
  // host does not wait).
  DeviceResampler(const std::vector<Crop>& crops, int size, const torch::Device& device);

  // Crop i of `image` (uint8 HWC on the device, of the size given) resized: float [S, S, 3], values
  // 0..255, not yet rounded.
  torch::Tensor Resize(size_t i, const torch::Tensor& image) const;

 private:
  struct Axis {
    int64_t first = 0, extent = 0;  // the source samples its taps read
    int64_t offset = 0, taps = 0;   // where its S × taps indices and weights start in the tensors
  };
  // The resampler along dim 0 of `x` ([in, n, 3], float).
  torch::Tensor ResampleDim0(const torch::Tensor& x, const Axis& axis) const;

  int size_;
  std::vector<std::array<Axis, 2>> axes_;  // per crop: rows, then columns
  torch::Tensor index_;                    // int64, every crop's source indices, relative to `first`
  torch::Tensor weight_;                   // float, their weights
};

// One crop resized on the image's device (a DeviceResampler of one).
torch::Tensor CropAndResize(const torch::Tensor& image, const data::Box& box, int size);

}  // namespace dtrun::worker
