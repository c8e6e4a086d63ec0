// What an exception that ends a trainer says, in the shape of Python's last traceback line:
// "TYPE: WHAT", the type demangled (c10::DistBackendError, std::bad_alloc). LibTorch's errors
// carry their C++ frames in what(); they become the call stack and stay out of the message.
#pragma once

#include <exception>
#include <string>

#include "absl/strings/string_view.h"

namespace dtrun::worker {

struct ExceptionText {
  std::string message;    // at most kMaxMessageBytes
  std::string callstack;  // at most kMaxCallstackBytes
};

inline constexpr size_t kMaxMessageBytes = 2000;
inline constexpr size_t kMaxCallstackBytes = 64 << 10;

ExceptionText DescribeException(const std::exception& e);

// The exception on stderr and in the error file (worker/error_record.h).
void ReportException(absl::string_view program, const std::exception& e);

}  // namespace dtrun::worker
