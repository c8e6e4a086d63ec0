// libFuzzer: a checkpoint file comes from a disk (a torn write, a flipped bit, a file from
// elsewhere), and its zip structure is checked before LibTorch's reader, which trusts it, sees a
// byte (worker/zip_check.h). Any bytes: no crash, no read outside them, and an answer in time
// bounded by their size (a member's data is read once, deflated members inflate within their
// claimed size).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "worker/zip_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const absl::Status s = dtrun::worker::VerifyZipChecksums(bytes);
  // Whatever is refused is refused as corrupt data, with a message that says what.
  if (!s.ok() && (s.code() != absl::StatusCode::kDataLoss || s.message().empty())) std::abort();
  return 0;
}
