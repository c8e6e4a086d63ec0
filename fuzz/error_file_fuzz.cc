// libFuzzer: a worker's error file (TORCHELASTIC_ERROR_FILE JSON) is untrusted: any bytes parse
// without an exception, and the texts the summary shows stay within their caps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "agent/failure_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dtrun::WorkerFailure f;
  dtrun::ParseErrorRecord(absl::string_view(reinterpret_cast<const char*>(data), size), f);
  // The cut marks the place where the whole text is; a little over the cap is that note.
  if (f.message.size() > dtrun::kMaxErrorTextBytes + 256 || f.traceback.size() > dtrun::kMaxErrorTextBytes + 256) {
    std::abort();
  }
  dtrun::FormatFailureSummary("prog", {f});
  return 0;
}
