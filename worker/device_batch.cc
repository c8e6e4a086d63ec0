#include "worker/device_batch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <numeric>
#include <optional>
#include <utility>

#include "worker/device_resize.h"
#include "worker/torch_compat.h"  // DTRUN_WITH_NCCL: a CUDA LibTorch

#if DTRUN_WITH_NCCL
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrun::worker {

// Where a batch is assembled: on a GPU, a stream of its own that the training stream then waits
// for, timed by events; elsewhere, in line, timed by the clock.
class DeviceBatchAssembler::DecodeStream {
 public:
  explicit DecodeStream(const torch::Device& device) : device_(device) {
#if DTRUN_WITH_NCCL
    if (device.is_cuda()) side_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
#endif
  }

  // Runs `build` (which returns the batch and how many JPEGs the device decoded for it).
  torch::Tensor Run(const std::function<std::pair<torch::Tensor, int>()>& build) {
#if DTRUN_WITH_NCCL
    if (side_) {
      const c10::cuda::CUDAStream consumer = c10::cuda::getCurrentCUDAStream(device_.index());
      Pending p;
      p.start.record(*side_);
      std::pair<torch::Tensor, int> built;
      {
        c10::cuda::CUDAStreamGuard guard(*side_);
        built = build();
      }
      p.end.record(*side_);
      p.end.block(consumer);
      p.images = built.second;
      pending_.push_back(std::move(p));
      if (pending_.size() > kMaxKept) pending_.pop_front();  // nobody takes them: keep the newest
      // Made on the decode stream, read on the consumer's: the allocator must not hand the memory
      // to the decode stream's next batch before the consumer is done with it.
      built.first.record_stream(consumer);
      return built.first;
    }
#endif
    const auto start = std::chrono::steady_clock::now();
    std::pair<torch::Tensor, int> built = build();
    done_.push_back({built.second, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
    if (done_.size() > kMaxKept) done_.erase(done_.begin());
    return built.first;
  }

  std::vector<DeviceTiming> TakeTimings() {
#if DTRUN_WITH_NCCL
    while (!pending_.empty() && pending_.front().end.query()) {
      Pending& p = pending_.front();
      done_.push_back({p.images, p.start.elapsed_time(p.end) / 1e3});
      pending_.pop_front();
    }
#endif
    return std::exchange(done_, {});
  }

 private:
  static constexpr size_t kMaxKept = 64;  // timings nobody has taken
  torch::Device device_;
  std::vector<DeviceTiming> done_;
#if DTRUN_WITH_NCCL
  struct Pending {
    at::cuda::CUDAEvent start{cudaEventDefault}, end{cudaEventDefault};  // with timing
    int images = 0;
  };
  std::optional<c10::cuda::CUDAStream> side_;
  std::deque<Pending> pending_;
#endif
};

namespace {

// A host tensor on `device`. From pinned memory the copy is queued, not waited for (from pageable
// memory it would wait for the stream).
torch::Tensor ToDevice(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host.clone();  // `host` may be a view of the batch's vectors
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

torch::Tensor Indices(const std::vector<int64_t>& v, const torch::Device& device) {
  return ToDevice(torch::tensor(v, torch::kInt64), device);
}

// Where each sample of a batch ends up.
struct Placement {
  std::vector<torch::Tensor> resized;  // float [S, S, 3] per image the device decoded
  std::vector<int64_t> device_slots;   // their slots
  std::vector<int64_t> flip_rows;      // which of them to mirror
  std::vector<int64_t> host_slots;     // the slots of the images in the batch's `pixels`
  std::vector<int64_t> dropped;        // slots nobody could decode
};

// The resized device images into their slots of `out`, mirrored where drawn and rounded.
void PutDeviceImages(const Placement& p, const torch::Device& device, torch::Tensor& out) {
  if (p.resized.empty()) return;
  torch::Tensor x = torch::stack(p.resized);  // [n, S, S, 3]
  if (!p.flip_rows.empty()) {
    const torch::Tensor rows = Indices(p.flip_rows, device);
    x.index_copy_(0, rows, x.index_select(0, rows).flip({2}));
  }
  // As the loader's resampler: halves round up.
  x = x.add_(0.5).floor_().clamp_(0, 255).to(torch::kUInt8);
  out.index_copy_(0, Indices(p.device_slots, device), x);
}

// The images decoded on the host (by the loader, or here) into their slots of `out`.
void PutHostImages(const Placement& p, data::Batch& batch, const torch::Device& device, torch::Tensor& out) {
  if (p.host_slots.empty()) return;
  const int s = batch.image_size;
  const torch::Tensor px =
      torch::from_blob(batch.pixels.data(), {static_cast<int64_t>(p.host_slots.size()), s, s, 3}, torch::kUInt8);
  out.index_copy_(0, Indices(p.host_slots, device), ToDevice(px, device));
}

// `out` without the dropped slots; the batch's labels, count and skipped to match.
torch::Tensor DropUndecodable(const std::vector<int64_t>& dropped, const torch::Device& device, data::Batch& batch,
                              const torch::Tensor& out) {
  if (dropped.empty()) return out;
  std::vector<int64_t> keep, labels;
  for (int64_t slot = 0; slot < batch.count; ++slot) {
    if (std::find(dropped.begin(), dropped.end(), slot) != dropped.end()) continue;
    keep.push_back(slot);
    labels.push_back(batch.labels[static_cast<size_t>(slot)]);
  }
  batch.labels = std::move(labels);
  batch.count = static_cast<int>(keep.size());
  batch.skipped += static_cast<int>(dropped.size());
  return keep.empty() ? out.narrow(0, 0, 0) : out.index_select(0, Indices(keep, device));
}

// Crops and resizes one image into `p`; false (said on stderr) if the device could not.
bool ResizeOnDevice(const DeviceResampler& resampler, size_t i, const torch::Tensor& image,
                    const data::EncodedSample& e, Placement& p) {
  try {
    p.resized.push_back(resampler.Resize(i, image));
  } catch (const c10::Error& err) {
    const std::string what = err.what_without_backtrace();
    std::fprintf(stderr, "warning: resizing a %dx%d image on the device failed (%s); decoding it on the host\n",
                 e.width, e.height, what.substr(0, what.find('\n')).c_str());
    return false;
  }
  if (e.flip) p.flip_rows.push_back(static_cast<int64_t>(p.resized.size()) - 1);
  p.device_slots.push_back(e.slot);
  return true;
}

}  // namespace

DeviceBatchAssembler::DeviceBatchAssembler(std::unique_ptr<JpegBatchDecoder> decoder, const torch::Device& device,
                                           int64_t max_image_pixels)
    : decoder_(std::move(decoder)),
      device_(device),
      host_decoder_(max_image_pixels),
      stream_(std::make_unique<DecodeStream>(device)) {}

DeviceBatchAssembler::~DeviceBatchAssembler() = default;

torch::Tensor DeviceBatchAssembler::Assemble(data::Batch& batch) {
  return stream_->Run([&] {
    const int64_t before = device_decoded_;
    torch::Tensor out = Build(batch);
    return std::make_pair(out, static_cast<int>(device_decoded_ - before));
  });
}

std::vector<DeviceBatchAssembler::DeviceTiming> DeviceBatchAssembler::TakeDeviceTimings() {
  return stream_->TakeTimings();
}

std::vector<torch::Tensor> DeviceBatchAssembler::DecodeOnDevice(const data::Batch& batch) {
  std::vector<torch::Tensor> images(batch.encoded.size());
  if (!decoder_ || batch.encoded.empty()) return images;
  std::vector<std::string_view> jpegs;
  jpegs.reserve(batch.encoded.size());
  for (const data::EncodedSample& e : batch.encoded) jpegs.emplace_back(e.bytes);
  absl::StatusOr<std::vector<torch::Tensor>> decoded = decoder_->Decode(jpegs);
  if (decoded.ok() && decoded->size() != jpegs.size()) {
    decoded = absl::InternalError("it returned a different number of images than it was given");
  }
  if (!decoded.ok()) {
    std::fprintf(stderr, "warning: %s failed on batch %zu (%s); its JPEGs are decoded on the host\n",
                 decoder_->Describe().c_str(), batch.index, std::string(decoded.status().message()).c_str());
    if (++failures_in_a_row_ >= kFailuresBeforeGivingUp) {
      std::fprintf(stderr, "warning: %s failed %d batches in a row; JPEGs are decoded on the host from now on "
                   "(more --workers keep the GPU fed)\n", decoder_->Describe().c_str(), failures_in_a_row_);
      decoder_.reset();
    }
    return images;
  }
  failures_in_a_row_ = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const torch::Tensor& t = (*decoded)[i];
    const data::EncodedSample& e = batch.encoded[i];
    // A decoder that reads the header differently from the loader leaves the image to the host.
    if (t.defined() && t.dim() == 3 && t.size(0) == e.height && t.size(1) == e.width && t.size(2) == 3 &&
        t.scalar_type() == torch::kUInt8) {
      images[i] = t;
      ++device_decoded_;
    }
  }
  return images;
}

torch::Tensor DeviceBatchAssembler::Build(data::Batch& batch) {
  Placement p;
  p.host_slots.assign(batch.pixel_slots.begin(), batch.pixel_slots.end());
  if (batch.encoded.empty()) {  // the loader decoded every sample, in order
    p.host_slots.resize(static_cast<size_t>(batch.count));
    std::iota(p.host_slots.begin(), p.host_slots.end(), 0);
  }
  const std::vector<torch::Tensor> images = DecodeOnDevice(batch);
  // Taps only for the images the device decoded; the others go to the host.
  std::vector<DeviceResampler::Crop> crops;
  for (size_t i = 0; i < images.size(); ++i) {
    const data::EncodedSample& e = batch.encoded[i];
    if (images[i].defined()) crops.push_back({e.height, e.width, e.box});
  }
  const DeviceResampler resampler(crops, batch.image_size, device_);
  size_t crop = 0;
  for (size_t i = 0; i < batch.encoded.size(); ++i) {
    const data::EncodedSample& e = batch.encoded[i];
    if (images[i].defined() && ResizeOnDevice(resampler, crop++, images[i], e, p)) continue;
    ++host_decoded_;
    if (DecodeOnHost(e, batch)) {
      p.host_slots.push_back(e.slot);
    } else {
      p.dropped.push_back(e.slot);
    }
  }
  const int s = batch.image_size;
  torch::Tensor out = torch::empty({batch.count, s, s, 3}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
  PutDeviceImages(p, device_, out);
  PutHostImages(p, batch, device_, out);
  return DropUndecodable(p.dropped, device_, batch, out);
}

bool DeviceBatchAssembler::DecodeOnHost(const data::EncodedSample& e, data::Batch& batch) {
  const size_t image_bytes = static_cast<size_t>(batch.image_size) * batch.image_size * 3;
  batch.pixels.resize(batch.pixels.size() + image_bytes);
  const absl::Status st = data::DecodeAndCrop(host_decoder_, e.bytes, e.box, e.flip, batch.image_size,
                                              batch.pixels.data() + batch.pixels.size() - image_bytes);
  if (st.ok()) return true;
  batch.pixels.resize(batch.pixels.size() - image_bytes);
  std::fprintf(stderr, "warning: skipping sample %d of batch %zu: %s\n", e.slot, batch.index,
               std::string(st.message()).c_str());
  return false;
}

}  // namespace dtrun::worker
