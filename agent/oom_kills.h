// Whether the kernel's out-of-memory killer ended a worker. torchrun shows such a worker as
// "exitcode: -9" and nothing more; the kernel counts its kills before it sends the SIGKILL, per
// memory cgroup (v2 memory.events, which counts child cgroups' kills too; v1 memory.oom_control,
// its own processes' only) and machine-wide (/proc/vmstat), so the agent that reaps a SIGKILLed
// worker compares the counts with those taken when the round started and can say so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dtrun {

// Kills counted so far; -1 where the counter cannot be read.
struct OomCounts {
  int64_t cgroup = -1;   // in this process's memory cgroup (v2: and those below it)
  int64_t machine = -1;  // on the whole machine
};

class OomKillCounter {
 public:
  // Finds this process's memory cgroup. `root` prefixes every path: "" for the real machine,
  // a directory holding proc/ and sys/ in tests.
  explicit OomKillCounter(std::string root = "");

  OomCounts Read() const;

  // A sentence for a worker that died of a SIGKILL dtrun did not send, when the counts say the
  // out-of-memory killer sent it; nullopt when no kill was counted between `before` and `now`.
  // The cgroup's count is preferred; the machine's is used where the cgroup has none.
  std::optional<std::string> ExplainKill(const OomCounts& before, const OomCounts& now) const;

  // A note for a worker that failed otherwise while the out-of-memory killer killed processes
  // of its cgroup (a DataLoader worker: PyTorch then raises "killed by signal: Killed"); nullopt
  // when the cgroup counted no kill. The machine's count is not enough for this.
  std::optional<std::string> NoteKillsBeside(const OomCounts& before, const OomCounts& now) const;

  // The file the cgroup's count is read from ("" when none was found): said in logs and tests.
  const std::string& cgroup_file() const { return cgroup_counter_file_; }

 private:
  // "; its memory limit is 512.0 MiB[, set on /job]": the smallest on the cgroup's way to the root;
  // "" where none is set.
  std::string LimitText() const;

  std::string cgroup_counter_file_;
  std::string hierarchy_;        // where the hierarchy with the memory controller is mounted
  std::string cgroup_path_;      // this process's cgroup in it ("" for its root)
  std::string limit_file_name_;  // memory.max (v2), memory.limit_in_bytes (v1)
  std::string vmstat_file_;
};

// The pure parts, for tests.
// The value after `key` in a file of "key value" lines (memory.events, /proc/vmstat).
std::optional<int64_t> FindCounter(absl::string_view text, absl::string_view key);
// This process's cgroup paths from /proc/self/cgroup: the v2 one ("0::PATH") and the v1 memory
// controller's ("N:memory,...:PATH"); empty where the file has none.
struct ProcCgroups {
  std::string v2;
  std::string v1_memory;
};
ProcCgroups ParseProcCgroup(absl::string_view text);

}  // namespace dtrun
