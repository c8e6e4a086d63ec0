// libFuzzer: what workers send their agent is untrusted: progress-report datagrams and
// torchelastic FileTimer lines. Chunks of the input (split at 0xFF) are fed as datagrams from
// rotating ranks into a board with hang rules, and as timer lines into a timer table. Nothing may
// throw or crash, accepted reports must survive a round trip, and the tables stay bounded.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "progress/file_timer.h"
#include "progress/progress_board.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtrun::progress;
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  ProgressBoard board(4);
  HangPolicy policy;
  policy.heartbeat_timeout = std::chrono::seconds(5);
  policy.section_timeouts["step"] = std::chrono::seconds(2);
  FileTimers timers;
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  int n = 0;
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\xff', start);
    if (end == absl::string_view::npos) end = input.size();
    absl::string_view chunk = input.substr(start, end - start);
    start = end + 1;
    now += std::chrono::milliseconds(700);
    absl::StatusOr<Report> r = ParseReport(chunk);
    if (r.ok()) {
      absl::StatusOr<Report> again = ParseReport(FormatReport(*r));
      if (!again.ok() || FormatReport(*again) != FormatReport(*r)) std::abort();
      board.Apply(n++ % 4, *r, now);
    }
    board.FindHang(policy, now);
    board.NextDeadline(policy);
    if (absl::StatusOr<TimerRequest> t = ParseTimerRequest(chunk); t.ok()) timers.Apply(*t);
    timers.TakeExpired(1e9);
    for (const RankProgress& rank : board.ranks()) {
      if (rank.sections.size() > kMaxOpenSections) std::abort();
      if (rank.waits.size() > kMaxRecentWaits) std::abort();
    }
    if (timers.size() > kMaxTimers) std::abort();
  }
  return 0;
}
