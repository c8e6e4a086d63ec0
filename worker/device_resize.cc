#include "worker/device_resize.h"

#include <algorithm>

#include "worker/data/transforms.h"

namespace dtrun::worker {

DeviceResampler::DeviceResampler(const std::vector<Crop>& crops, int size, const torch::Device& device)
    : size_(size) {
  if (crops.empty()) return;
  std::vector<std::array<data::ResampleTaps, 2>> taps;  // per crop: rows, then columns
  taps.reserve(crops.size());
  int64_t n = 0;
  for (const Crop& c : crops) {
    taps.push_back({data::ComputeResampleTaps(c.box.y, c.box.h, static_cast<int>(c.height), size),
                    data::ComputeResampleTaps(c.box.x, c.box.w, static_cast<int>(c.width), size)});
    n += static_cast<int64_t>(taps.back()[0].weight.size() + taps.back()[1].weight.size());
  }
  // Indices travel as float beside the weights, in one copy (from pinned memory, written in
  // place): whole numbers below 2^24, exact.
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(device.is_cuda());
  torch::Tensor host = torch::empty({2, n}, options);
  float* index = host.data_ptr<float>();
  float* weight = index + n;
  axes_.reserve(crops.size());
  int64_t offset = 0;
  for (const std::array<data::ResampleTaps, 2>& both : taps) {
    std::array<Axis, 2> axes;
    for (int a = 0; a < 2; ++a) {
      const data::ResampleTaps& t = both[a];
      Axis& axis = axes[a];
      axis.first = t.start.front();
      axis.extent = std::max(1, t.start.back() + t.count.back() - t.start.front());
      axis.offset = offset;
      axis.taps = t.max_taps;
      for (int o = 0; o < size; ++o) {
        for (int k = 0; k < t.max_taps; ++k) {
          // A tap past the count weighs 0 and reads the output's first sample, which exists.
          index[offset++] = static_cast<float>(t.start[o] + (k < t.count[o] ? k : 0) - axis.first);
        }
      }
      std::copy(t.weight.begin(), t.weight.end(), weight + axis.offset);
    }
    axes_.push_back(axes);
  }
  const torch::Tensor on_device = device.is_cuda() ? host.to(device, /*non_blocking=*/true) : host;
  index_ = on_device[0].to(torch::kInt64);
  weight_ = on_device[1];
}

torch::Tensor DeviceResampler::ResampleDim0(const torch::Tensor& x, const Axis& axis) const {
  const int64_t taps = size_ * axis.taps;
  const torch::Tensor gathered = x.index_select(0, index_.narrow(0, axis.offset, taps)).reshape({size_, axis.taps, -1});
  const torch::Tensor weight = weight_.narrow(0, axis.offset, taps).view({size_, 1, axis.taps});
  return torch::bmm(weight, gathered).reshape({size_, x.size(1), x.size(2)});
}

torch::Tensor DeviceResampler::Resize(size_t i, const torch::Tensor& image) const {
  const Axis& rows = axes_.at(i)[0];
  const Axis& cols = axes_.at(i)[1];
  // Only the source rows and columns the taps read, as float (one kernel from the strided view);
  // rows first, as the host's resampler.
  const torch::Tensor crop =
      image.narrow(0, rows.first, rows.extent).narrow(1, cols.first, cols.extent).to(torch::kFloat32);
  const torch::Tensor resized_rows = ResampleDim0(crop, rows);              // [S, cols, 3]
  return ResampleDim0(resized_rows.transpose(0, 1), cols).transpose(0, 1);  // [S, S, 3]
}

torch::Tensor CropAndResize(const torch::Tensor& image, const data::Box& box, int size) {
  return DeviceResampler({{image.size(0), image.size(1), box}}, size, image.device()).Resize(0, image);
}

}  // namespace dtrun::worker
