// JPEG decoding on an NVIDIA GPU with nvJPEG's batched API: the GPU's hardware JPEG engines where it
// has them (A100, H100, H200), else nvJPEG's GPU-assisted Huffman decoding. Plain baseline JPEGs
// only: a JPEG the chosen backend does not take (progressive ones, for the hardware engines) comes
// back undefined for the host to decode. Built where CMake finds nvjpeg.h and libnvjpeg (the CUDA
// toolkit's, or a pip wheel's nvidia/nvjpeg: NVJPEG_INCLUDE_DIR, NVJPEG_LIBRARY_DIR).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "worker/device_batch.h"

namespace dtrun::worker {

// Whether this build has nvJPEG.
bool NvJpegBuilt();

// Unavailable (saying why) in a build without nvJPEG, or where no backend starts on `device`.
absl::StatusOr<std::unique_ptr<JpegBatchDecoder>> MakeNvJpegDecoder(const torch::Device& device);

}  // namespace dtrun::worker
