// LibTorch's checkpoint reader (a zip of pickles and tensors, read through TorchScript's importer)
// trusts its input: some corruptions of a checkpoint file crash the process inside it. So every
// checkpoint's bytes are checked first, with bounds-checked parsing of the zip's central
// directory and the CRC-32 of every member (PyTorch stores members uncompressed with their CRC).
// A torn write, a flipped bit or a file that is not a checkpoint never reaches LibTorch.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace dtrun::worker {

// OK if `bytes` is a well-formed zip whose members all match their CRC-32; DataLoss naming the
// first problem otherwise.
absl::Status VerifyZipChecksums(std::string_view bytes);

}  // namespace dtrun::worker
