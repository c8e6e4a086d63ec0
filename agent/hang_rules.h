// The decisions of hang detection that need no process, file or clock of their own (HangWatch in
// agent/hang_watch.h applies them): how a hang is said, which rank a collective hang blames from
// the stacks, how long a report waits for a node that knows more, and when a thread seen in
// uninterruptible sleep counts as stuck. Time comes in as arguments, so tests use made-up times.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "progress/progress_board.h"

namespace dtrun {

// "no progress report for 6.0 s (--heartbeat-timeout 5), after step 12" and the like, by rule.
std::string DescribeHang(const progress::Hang& hang);
// "in uninterruptible sleep (D state) for at least 31.0 s in nfs_wait (--dstate-timeout 30)".
std::string DescribeDState(const progress::Hang& hang, const std::string& wchan);

// Where each local rank's stacks place it: inside a torch.distributed collective or elsewhere
// (nullopt: its stacks could not be read).
struct RankStacks {
  int local_rank = 0;
  std::optional<bool> in_collective;
};

struct HangBlame {
  int local_rank = 0;  // the rank the report names
  std::string note;    // why another rank than the detected one ("" if none)
  // Every readable rank waits in a collective on a job of several nodes: the report waits this
  // long for a node whose rank is elsewhere (it would name the real culprit).
  std::optional<std::chrono::milliseconds> hold;
};

// The rank to blame for a hang detected at `detected_local_rank`: a rank outside any collective
// while others wait in one is the likely culprit (every rank of a collective hang stops reporting
// at once, so the first one detected is often only waiting). `global_rank_of` maps local ranks.
HangBlame BlameHang(int detected_local_rank, std::chrono::milliseconds limit, const std::vector<RankStacks>& stacks,
                    const std::vector<int64_t>& global_rank_of, int nodes);

// Threads in uninterruptible sleep (D state), sampled, since the kernel tells nobody when a
// thread enters it. A worker is stuck once some thread was in D state at two looks without being
// switched in between, for at least the timeout since it was first seen so.
class DStateTracker {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DStateTracker(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // The time between looks (a tenth of the timeout, within 0.1 s .. 5 s).
  std::chrono::milliseconds interval() const;
  // One look at `pid`: its threads now in D state with their context-switch counts. Returns since
  // when it has been stuck once that is at least the timeout ago; nullopt otherwise.
  std::optional<Clock::time_point> Observe(pid_t pid, std::map<pid_t, uint64_t> sleeping, Clock::time_point now);
  void Forget(pid_t pid) { stuck_.erase(pid); }
  void Clear() { stuck_.clear(); }

 private:
  struct Stuck {
    Clock::time_point since;
    std::map<pid_t, uint64_t> threads;  // tid -> context switches at the first look
  };
  std::chrono::milliseconds timeout_;
  std::map<pid_t, Stuck> stuck_;
};

}  // namespace dtrun
