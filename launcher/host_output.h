// The output of every host of a `dtrun -H` job on the one console of the launching dtrun. Each
// host's dtrun already prefixes its workers' lines and holds a prompt back until its worker goes
// quiet; here the hosts' streams are joined so that:
//   - whole lines pass as they come; dtrun's own say which host they come from ("[dtrun HOST]"),
//     and the job's failure summary, which every host prints, is shown once (SummaryDedup);
//   - a partial line (a pdb or input() prompt, a progress bar's latest state) is shown once its
//     stream has been quiet for kQuietTime, and a partial line that began a line and redraws
//     nothing is a prompt: the next line typed goes to that host (launcher/ssh_launcher.cc);
//   - two hosts never share a console line (agent/console.h ends another's open line first).
// Not thread-safe: the launcher's event loop drives it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "agent/console.h"
#include "launcher/summary_dedup.h"

namespace dtrun {

class HostOutput {
 public:
  using Clock = std::chrono::steady_clock;
  // Short: the host's dtrun held the partial line for its own quiet time already; this only joins
  // what ssh delivered in pieces.
  static constexpr std::chrono::milliseconds kQuietTime{20};
  static constexpr size_t kMaxLine = 64 * 1024;  // a longer partial line is shown at once

  HostOutput(std::vector<std::string> host_names, Consoles consoles);

  // Bytes from host `host`'s stdout or stderr.
  void Write(int host, bool is_stderr, absl::string_view data, Clock::time_point now);
  // The stream ended: what it holds is shown, and its open line ended.
  void End(int host, bool is_stderr);
  // When a held partial line is due (nullopt: none held).
  std::optional<Clock::time_point> quiet_deadline() const;
  // Shows the partial lines quiet since kQuietTime. Returns the hosts that showed a prompt.
  std::vector<int> ShowQuiet(Clock::time_point now);
  // The launcher reads the hosts again after the console was congested: quiet time starts now.
  void ReadingResumed(Clock::time_point now);
  // The terminal ended the console line (it echoed a typed line).
  void ForgetOpenLines();
  // Failure summaries left out because a host had already shown them.
  int dropped_summaries() const { return summaries_.dropped(); }

 private:
  struct Stream {
    std::string partial;     // bytes after the last newline, not shown yet
    bool line_open = false;  // part of the current line is on the console
    Clock::time_point last_data;
  };
  using Key = std::pair<int, bool>;  // host, is_stderr
  void ShowLine(const Key& key, Stream& s, std::string line);
  void Show(const Key& key, Stream& s, absl::string_view text, Console::End end);
  std::string Relabel(int host, std::string line) const;
  Console& ConsoleOf(const Key& key) const { return key.second ? *consoles_.err : *consoles_.out; }

  std::vector<std::string> names_;
  Consoles consoles_;
  std::map<Key, Stream> streams_;
  SummaryDedup summaries_;
};

}  // namespace dtrun
