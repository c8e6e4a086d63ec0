// Warm workers (docs/DESIGN.md, "Warm workers"): the next attempt's workers, started while the
// current round trains and parked in worker::AwaitRound until a restart releases them with the
// new round's environment. A restart then skips exec, the dynamic loader and the program's start
// (LibTorch's alone is ~0.35 s of CPU per process). Only for programs whose workers said `warm`
// in their hello; a parked worker that dies turns the pool off for the run (it would die again).
// Parked workers are children of the agent in process groups of their own, with the parent-death
// signal: they end with the agent like any worker. Not thread-safe: the agent's loop owns it.
#pragma once

#include <sys/types.h>

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/child_process.h"
#include "base/unique_fd.h"

namespace dtrun {

class WarmPool {
 public:
  // `enabled` false (--warm-workers off): the pool parks nothing and releases nothing.
  explicit WarmPool(bool enabled = true) : off_(!enabled) {}

  // Starts parked workers until each local rank in `requests` (by local rank: the current round's
  // own spawn requests) has `depth` of them. Depth 2 on several nodes: a node lost there usually
  // shows first as a worker's broken connection, and the restart that follows is a round that
  // never forms; it takes one generation and the round after it the other, already loaded. A
  // start that fails is said once and turns the pool off.
  void Fill(const std::vector<SpawnRequest>& requests, int depth = 1);
  // After a round that ended before it trained (a restart into a round that never formed): fills
  // only if the program parks (workers were parked before) and none is left. Workers still parked
  // serve the next round; new ones now would only take its CPU while it starts.
  void RefillIfEmpty(const std::vector<SpawnRequest>& requests, int depth) {
    if (parked_before_ && size_ == 0) Fill(requests, depth);
  }
  // The oldest parked worker of `local_rank`, released into the round whose spawn request is
  // `request`; nullopt when none is parked, it was started for another command, or it is gone
  // (the caller then spawns as usual).
  std::optional<ChildProcess> Release(int local_rank, const SpawnRequest& request);
  // A reaped exit. True if `pid` was a parked worker: it is dropped, said once, and the pool
  // turns off.
  bool OnExit(pid_t pid, int wait_status);
  bool Holds(pid_t pid) const;
  bool off() const { return off_; }
  size_t size() const { return size_; }
  // Ends every parked worker (SIGKILL to its group, reaped).
  void Clear() {
    parked_.clear();
    size_ = 0;
  }

 private:
  struct Parked {
    SpawnRequest request;  // what it was started as (its env aside)
    ChildProcess process;
    UniqueFd release;      // the park pipe's write end
  };
  void TurnOff(const std::string& why);

  std::map<int, std::deque<Parked>> parked_;  // by local rank, oldest first
  size_t size_ = 0;
  bool off_ = false;
  bool said_ = false;
  bool parked_before_ = false;  // some Fill started workers: the program parks
};

}  // namespace dtrun
