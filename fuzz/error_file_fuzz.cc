// libFuzzer: what a worker leaves behind when it fails is untrusted: its error file
// (TORCHELASTIC_ERROR_FILE JSON) and the tail of its stderr. Any bytes parse without an exception,
// and the texts the summary shows stay within their caps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "agent/failure_report.h"
#include "agent/stderr_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  dtrun::WorkerFailure f;
  dtrun::ParseErrorRecord(bytes, f);
  // The cut marks the place where the whole text is; a little over the cap is that note.
  if (f.message.size() > dtrun::kMaxErrorTextBytes + 256 || f.traceback.size() > dtrun::kMaxErrorTextBytes + 256) {
    std::abort();
  }
  dtrun::FormatFailureSummary("prog", {f});
  // The same bytes as a stderr tail, cut or whole, from a worker that exited or was signalled.
  const absl::string_view tail = bytes.substr(0, dtrun::kStderrTailBytes);
  for (int variant = 0; variant < 4; ++variant) {
    std::optional<dtrun::StderrError> e = dtrun::FindErrorInStderr(tail, variant & 1, variant & 2);
    if (e && (e->message.size() > 1024 + 3 || e->traceback.size() > dtrun::kMaxStderrErrorBytes + 64)) std::abort();
  }
  return 0;
}
