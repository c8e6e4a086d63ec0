// For the tests of worker/device_resize.h, on the CPU and on a GPU: how far CropAndResize on a
// device is from the loader's resampler (data::ResizeCrop) on the same box.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "worker/data/image.h"
#include "worker/data/transforms.h"
#include "worker/device_resize.h"

namespace dtrun::worker::testing {

struct ResizeDiff {
  int max = 0;     // levels
  float mean = 0;
};

// `image` (uint8 HWC on the host) resized on `device` and rounded as the loader rounds, against
// the loader's own resize of it.
inline ResizeDiff DiffFromLoadersResampler(const torch::Tensor& image, const data::Box& box, int size,
                                           const torch::Device& device) {
  const torch::Tensor host = image.contiguous();
  data::Image src;
  src.height = static_cast<int>(host.size(0));
  src.width = static_cast<int>(host.size(1));
  src.rgb.assign(host.data_ptr<uint8_t>(), host.data_ptr<uint8_t>() + host.numel());
  std::vector<uint8_t> want(static_cast<size_t>(size) * size * 3);
  data::ResizeCrop(src, box, size, size, /*flip=*/false, want.data());
  const torch::Tensor got = CropAndResize(host.to(device), box, size).add(0.5).floor().clamp(0, 255).cpu();
  const torch::Tensor diff =
      (got.to(torch::kInt32) - torch::from_blob(want.data(), {size, size, 3}, torch::kUInt8).to(torch::kInt32)).abs();
  return {diff.max().item<int>(), diff.to(torch::kFloat32).mean().item<float>()};
}

}  // namespace dtrun::worker::testing
