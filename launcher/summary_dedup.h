// The failure summary of a job started with `dtrun -H`, shown once. Every node learns the job's
// failures from the rendezvous and prints the same job-wide summary, so the one console the
// launching dtrun relays would show it once per host. A block that starts with the summary's rule
// line followed by "PROGRAM FAILED" and ends at the next rule line is held until it is whole, and
// dropped if another host already showed the same text. The lines a host prints after its summary
// (the workers' Python, what was snapshotted) are dropped too where another host already printed
// the same line after its own; a line that differs (another Python there) is shown. Any other line
// passes at once. Not thread-safe: the launcher's event loop feeds it.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dtrun {

class SummaryDedup {
 public:
  // A held block longer than this is passed on as it is (it is not a summary dtrun wrote).
  static constexpr size_t kMaxBlock = 4 << 20;
  // Summaries remembered (a job prints one; more are shown, and not remembered).
  static constexpr size_t kMaxKept = 8;
  // Lines after a summary remembered (more are shown, and not remembered).
  static constexpr size_t kMaxTrailer = 64;

  // One line of `stream` (one per host's stderr), with its newline: the lines to write now.
  std::vector<std::string> Feed(int stream, std::string line);
  // At the stream's end: what it still holds.
  std::vector<std::string> Flush(int stream);
  // True while `stream` holds lines back (a rule line, or a summary being collected).
  bool holding(int stream) const {
    auto it = held_.find(stream);
    return it != held_.end() && (it->second.rule || !it->second.block.empty());
  }
  // Summaries left out because a host had already shown them.
  int dropped() const { return dropped_; }

 private:
  struct Held {
    std::optional<std::string> rule;  // a rule line, waiting for the next line to tell
    std::string block;                // a summary being collected ("" when none)
  };
  std::map<int, Held> held_;
  std::set<std::string> shown_;
  std::set<int> after_summary_;          // streams past their summary
  std::set<std::string> trailer_shown_;  // lines shown after a summary
  int dropped_ = 0;
};

}  // namespace dtrun
