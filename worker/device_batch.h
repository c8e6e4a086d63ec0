// Batches finished on the training device. The loader leaves plain JPEGs encoded
// (data::LoaderOptions::hand_on_jpegs_up_to_pixels) with the crop and flip it drew for them; here
// they are decoded in one batch on the device (nvJPEG on a GPU: worker/nvjpeg_decoder.h), each
// cropped and resized there with the loader's own filter (worker/device_resize.h),
// mirrored where drawn, and put in their slots beside the images the loader decoded. So the host's
// cores only read files and parse headers.
//
// On a GPU all of it runs on a stream of its own, and the training stream waits for it with an
// event: the GPU decodes batch n+1 while it trains on batch n, and nothing here waits for the GPU.
// A JPEG the device decoder does not take is decoded on the host as the loader would; one that no
// decoder can decode is dropped from the batch, counted and logged, as the loader drops it.
// One thread (the training loop's).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "worker/data/decode.h"
#include "worker/data/loader.h"

namespace dtrun::worker {

// JPEGs up to this many pixels are decoded on the device: a batch of 256 then needs at most 3 GiB
// for its decoded images. Larger ones are decoded on the host (at 1/2 to 1/8 scale, as they allow).
inline constexpr int64_t kDeviceDecodeMaxPixels = int64_t{4} << 20;

// Decodes whole JPEGs into uint8 HWC images on a device, queued on the current stream.
class JpegBatchDecoder {
 public:
  virtual ~JpegBatchDecoder() = default;
  // One image per input, or an undefined tensor for a JPEG this decoder does not take (the caller
  // decodes those on the host). An error: none was decoded.
  virtual absl::StatusOr<std::vector<torch::Tensor>> Decode(const std::vector<std::string_view>& jpegs) = 0;
  // For the log: what decodes ("nvJPEG, hardware decoder").
  virtual std::string Describe() const = 0;
};

class DeviceBatchAssembler {
 public:
  DeviceBatchAssembler(std::unique_ptr<JpegBatchDecoder> decoder, const torch::Device& device,
                       int64_t max_image_pixels = data::Decoder::kDefaultMaxPixels);
  ~DeviceBatchAssembler();

  // The batch's pixels as uint8 [count, S, S, 3] on the device, in sample order, ready for work
  // queued later on the current stream. Samples that nothing could decode are removed from
  // `batch` (labels, count) and added to its `skipped`.
  torch::Tensor Assemble(data::Batch& batch);

  // Batches whose work on the device is done, since the last call: the JPEGs the device decoded
  // and the seconds its decode stream spent on the batch (worker/decode_share.h balances on them).
  struct DeviceTiming {
    int images = 0;
    double seconds = 0;
  };
  std::vector<DeviceTiming> TakeDeviceTimings();

  // JPEGs handed to the device decoder, and those of them it left to the host.
  int64_t device_decoded() const { return device_decoded_; }
  int64_t host_decoded() const { return host_decoded_; }
  // False once the device decoder failed kFailuresBeforeGivingUp batches in a row: every JPEG is
  // then decoded on the host.
  bool decoder_in_use() const { return decoder_ != nullptr; }

  static constexpr int kFailuresBeforeGivingUp = 3;

 private:
  class DecodeStream;
  torch::Tensor Build(data::Batch& batch);
  // The device decoder's images for the batch's encoded samples (undefined: not decoded there).
  std::vector<torch::Tensor> DecodeOnDevice(const data::Batch& batch);
  // Decodes one as the loader would, appended to the batch's pixels; false if it cannot be.
  bool DecodeOnHost(const data::EncodedSample& e, data::Batch& batch);

  std::unique_ptr<JpegBatchDecoder> decoder_;
  torch::Device device_;
  data::Decoder host_decoder_;
  std::unique_ptr<DecodeStream> stream_;
  int failures_in_a_row_ = 0;
  int64_t device_decoded_ = 0, host_decoded_ = 0;
};

}  // namespace dtrun::worker
