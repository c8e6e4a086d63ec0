#include "worker/error_record.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "base/atomic_file.h"
#include "base/env_names.h"
#include "base/unix_time.h"
#include "nlohmann/json.hpp"

namespace dtrun::worker {

std::string ErrorRecordJson(absl::string_view message, absl::string_view callstack, int64_t unix_ms) {
  const absl::string_view stack = callstack.empty() ? message : callstack;
  const nlohmann::json record = {
      {"message",
       {{"message", std::string(message.data(), message.size())},
        {"extraInfo",
         {{"py_callstack", std::string(stack.data(), stack.size())}, {"timestamp", std::to_string(unix_ms / 1000)}}}}}};
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ReportFatalError(absl::string_view program, absl::string_view message, absl::string_view callstack) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(program.size()), program.data(),
               static_cast<int>(message.size()), message.data());
  const char* path = std::getenv(env::kErrorFile);
  if (path == nullptr || *path == '\0') return;
  // The first error is the cause and what follows a consequence: a record there stays (stderr has
  // every line). Each attempt's file is new, from dtrun and torchrun alike.
  if (::access(path, F_OK) == 0) return;
  try {
    absl::Status st = WriteFileAtomically(path, ErrorRecordJson(message, callstack, UnixMillisNow()), 0644);
    if (!st.ok()) {
      std::fprintf(stderr, "%.*s: the error file was not written: %s\n", static_cast<int>(program.size()),
                   program.data(), std::string(st.message()).c_str());
    }
  } catch (const std::exception& e) {  // out of memory: stderr has the line already
    std::fprintf(stderr, "%.*s: the error file was not written: %s\n", static_cast<int>(program.size()), program.data(),
                 e.what());
  }
}

}  // namespace dtrun::worker
