#include "worker/nvjpeg_decoder.h"

#if DTRUN_WITH_NVJPEG
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nvjpeg.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#endif

namespace dtrun::worker {

#if DTRUN_WITH_NVJPEG
namespace {

const char* StatusName(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "no such backend on this GPU";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "not implemented";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
  }
  return "unknown status";
}

absl::Status Check(nvjpegStatus_t s, const char* call) {
  if (s == NVJPEG_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", StatusName(s), " (", static_cast<int>(s), ")"));
}

// Each decoded image starts at a multiple of this in the batch's buffer.
constexpr int64_t kImageAlignment = 256;

class NvJpegDecoder final : public JpegBatchDecoder {
 public:
  explicit NvJpegDecoder(const torch::Device& device) : device_(device) {}
  ~NvJpegDecoder() override {
    if (parsed_) nvjpegJpegStreamDestroy(parsed_);
    for (Slot& slot : slots_) {
      if (slot.used) slot.done.synchronize();  // its batch may still be decoding
      if (slot.state) nvjpegJpegStateDestroy(slot.state);
    }
    if (handle_) nvjpegDestroy(handle_);
  }

  absl::Status Start() {
    c10::cuda::CUDAGuard guard(device_.index());
    nvjpegStatus_t s = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &handle_);
    hardware_ = s == NVJPEG_STATUS_SUCCESS;
    if (!hardware_) {
      handle_ = nullptr;
      s = nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID, nullptr, nullptr, 0, &handle_);
      if (s != NVJPEG_STATUS_SUCCESS) handle_ = nullptr;
      DT_RETURN_IF_ERROR(Check(s, "nvjpegCreateEx"));
    }
    for (Slot& slot : slots_) {
      DT_RETURN_IF_ERROR(Check(nvjpegJpegStateCreate(handle_, &slot.state), "nvjpegJpegStateCreate"));
    }
    DT_RETURN_IF_ERROR(Check(nvjpegJpegStreamCreate(handle_, &parsed_), "nvjpegJpegStreamCreate"));
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return hardware_ ? "nvJPEG (the GPU's hardware JPEG decoder)" : "nvJPEG (GPU-assisted Huffman decoding)";
  }

  absl::StatusOr<std::vector<torch::Tensor>> Decode(const std::vector<std::string_view>& jpegs) override {
    std::vector<torch::Tensor> out(jpegs.size());
    struct Planned {
      size_t index;
      int width, height;
      int64_t offset;
    };
    std::vector<Planned> plan;
    int64_t total = 0;
    for (size_t i = 0; i < jpegs.size(); ++i) {
      const auto* data = reinterpret_cast<const unsigned char*>(jpegs[i].data());
      int components = 0;
      nvjpegChromaSubsampling_t chroma = NVJPEG_CSS_UNKNOWN;
      int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
      if (nvjpegGetImageInfo(handle_, data, jpegs[i].size(), &components, &chroma, widths, heights) !=
              NVJPEG_STATUS_SUCCESS ||
          components != 3 || widths[0] <= 0 || heights[0] <= 0 ||
          int64_t{widths[0]} * heights[0] > kDeviceDecodeMaxPixels) {
        continue;  // the host decodes it; the size bound holds whatever nvJPEG's parser reads
      }
      if (hardware_ && !HardwareTakes(data, jpegs[i].size())) continue;
      plan.push_back(Planned{i, widths[0], heights[0], total});
      const int64_t bytes = int64_t{widths[0]} * heights[0] * 3;
      total += (bytes + kImageAlignment - 1) / kImageAlignment * kImageAlignment;
    }
    if (plan.empty()) return out;

    const torch::Tensor buffer = torch::empty({total}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> images(plan.size());
    for (size_t j = 0; j < plan.size(); ++j) {
      const Planned& p = plan[j];
      data.push_back(reinterpret_cast<const unsigned char*>(jpegs[p.index].data()));
      lengths.push_back(jpegs[p.index].size());
      images[j] = nvjpegImage_t{};
      images[j].channel[0] = buffer.data_ptr<uint8_t>() + p.offset;
      images[j].pitch[0] = static_cast<size_t>(p.width) * 3;
    }
    const int count = static_cast<int>(plan.size());
    Slot& slot = NextSlot();
    if (count != slot.initialized_for) {
      DT_RETURN_IF_ERROR(Check(nvjpegDecodeBatchedInitialize(handle_, slot.state, count, 1, NVJPEG_OUTPUT_RGBI),
                               "nvjpegDecodeBatchedInitialize"));
      slot.initialized_for = count;
    }
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_.index());
    const nvjpegStatus_t s =
        nvjpegDecodeBatched(handle_, slot.state, data.data(), lengths.data(), images.data(), stream.stream());
    slot.done.record(stream);  // after a failure too: whatever it queued
    slot.used = true;
    if (s != NVJPEG_STATUS_SUCCESS) {
      slot.initialized_for = -1;  // a failed batch leaves the state to be reset
      return Check(s, "nvjpegDecodeBatched");
    }
    for (const Planned& p : plan) {
      out[p.index] = buffer.narrow(0, p.offset, int64_t{p.width} * p.height * 3).view({p.height, p.width, 3});
    }
    return out;
  }

 private:
  // A decode state and the event after the last batch queued with it. Two in turn: the host
  // fills a state's buffers for batch n+1 while batch n may still be decoding from the other one,
  // and reuses a state only once its batch (two back, long done as a rule) is.
  struct Slot {
    nvjpegJpegState_t state = nullptr;
    at::cuda::CUDAEvent done;
    bool used = false;
    int initialized_for = -1;  // the batch size nvjpegDecodeBatchedInitialize was last called with
  };
  Slot& NextSlot() {
    Slot& slot = slots_[next_slot_];
    next_slot_ ^= 1;
    if (slot.used) slot.done.synchronize();
    return slot;
  }

  // The hardware engines take baseline JPEGs with a single scan and common chroma subsampling.
  bool HardwareTakes(const unsigned char* data, size_t size) {
    int not_supported = 1;
    return nvjpegJpegStreamParseHeader(handle_, data, size, parsed_) == NVJPEG_STATUS_SUCCESS &&
           nvjpegDecodeBatchedSupported(handle_, parsed_, &not_supported) == NVJPEG_STATUS_SUCCESS &&
           not_supported == 0;
  }

  torch::Device device_;
  nvjpegHandle_t handle_ = nullptr;
  Slot slots_[2];
  int next_slot_ = 0;
  nvjpegJpegStream_t parsed_ = nullptr;
  bool hardware_ = false;
};

}  // namespace

bool NvJpegBuilt() { return true; }

absl::StatusOr<std::unique_ptr<JpegBatchDecoder>> MakeNvJpegDecoder(const torch::Device& device) {
  if (!device.is_cuda()) return absl::UnavailableError("nvJPEG decodes on a GPU; this process trains on the CPU");
  auto decoder = std::make_unique<NvJpegDecoder>(device);
  absl::Status st = decoder->Start();
  if (!st.ok()) return absl::UnavailableError(absl::StrCat("nvJPEG did not start on this GPU: ", st.message()));
  return decoder;
}

#else

bool NvJpegBuilt() { return false; }

absl::StatusOr<std::unique_ptr<JpegBatchDecoder>> MakeNvJpegDecoder(const torch::Device& device) {
  if (!device.is_cuda()) return absl::UnavailableError("nvJPEG decodes on a GPU; this process trains on the CPU");
  return absl::UnavailableError(
      "this build has no nvJPEG (CMake found no nvjpeg.h and libnvjpeg; set NVJPEG_INCLUDE_DIR and NVJPEG_LIBRARY_DIR)");
}

#endif

}  // namespace dtrun::worker
