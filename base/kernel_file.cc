#include "base/kernel_file.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "base/untrusted_file.h"

namespace dtrun {

constexpr size_t kMaxKernelFile = 64 << 10;  // a CPU list of thousands of CPUs is a few KiB

std::string ReadKernelFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadUntrustedFile(path, kMaxKernelFile);
  return text.ok() ? std::string(absl::StripAsciiWhitespace(*text)) : "";
}

std::optional<int64_t> ReadKernelNumber(const std::string& path) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(ReadKernelFile(path), &value)) return std::nullopt;
  return value;
}

}  // namespace dtrun
