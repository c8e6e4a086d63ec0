// Lines up the ranks' all-reduce waits step by step and feeds the judge (issue 24). Waits arrive
// per rank, in batches, from the agents' status pushes: a step is judged once every rank of the
// round has reported it. Only each pending step's smallest two waits are kept, so memory is
// O(ranks + pending steps), whatever the job's size. Plain logic; not thread-safe.
//
// Nodes too: when every rank of a node is slow (a throttled host, a noisy neighbour), the last
// arrival moves between its ranks and no single rank is last in most steps. With the ranks'
// nodes given, a second judge looks at each step's smallest wait against the smallest on any
// other node, and names the node.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "straggler/straggler_judge.h"

namespace dtrun::straggler {

class StragglerWatch {
 public:
  // Steps waiting for their last rank's report; older ones are dropped first.
  static constexpr size_t kMaxPendingSteps = 256;
  // Jobs of more ranks are not watched (16 bytes a rank).
  static constexpr int kMaxRanks = 1 << 20;

  explicit StragglerWatch(JudgeOptions options = {}) : judge_(options), node_judge_(options) {}

  // A new round of `world` ranks: nothing of the last round counts. Fewer than two ranks: nothing
  // is judged. `node_of_rank` (by rank, world entries; else ignored) lets whole nodes be named.
  void Reset(int world, std::vector<int> node_of_rank = {});
  // Rank `rank` waited `wait_s` inside step `step`'s gradient all-reduce, in a step of `step_s`.
  // A rank's steps must rise (a repeat is ignored: pushes may be resent). InvalidArgument for a rank
  // out of range or a negative or non-finite time; nothing changes then.
  absl::Status Observe(int rank, int64_t step, double wait_s, double step_s);

  std::optional<Verdict> Current() const { return judge_.Current(); }
  // The node holding the job back (Verdict::rank is the node's index in `node_of_rank`), judged
  // from the lead of each step's last node over the next; nullopt without nodes or verdict.
  std::optional<Verdict> CurrentNode() const { return node_judge_.Current(); }
  int world() const { return static_cast<int>(last_seen_.size()); }
  int64_t judged_step() const { return judged_; }  // the newest step judged (-1: none)
  // The step whose judgement first named the rank (or else the node) named now, without a break
  // since (-1: none).
  int64_t named_since() const { return named_since_; }
  // The node of `rank` as Reset was told (-1: not told, or out of range).
  int NodeOf(int rank) const {
    return rank >= 0 && static_cast<size_t>(rank) < node_of_rank_.size() ? node_of_rank_[rank] : -1;
  }

 private:
  struct Pending {
    int count = 0;
    int min_rank = -1;
    double min_s = 0, next_s = 0;  // the smallest wait and the next
    double step_s = 0;             // the longest step any rank saw
    double other_node_s = 0;       // the smallest wait on a node other than min_rank's
  };
  void Judge(int64_t step, const Pending& p);

  StragglerJudge judge_;
  StragglerJudge node_judge_;
  std::vector<int> node_of_rank_;
  std::vector<int64_t> last_seen_;  // by rank: its newest step observed
  std::map<int64_t, Pending> pending_;
  int64_t judged_ = -1;
  int named_ = -1;  // who is named: a rank, or -2 - node; -1: nobody
  int64_t named_since_ = -1;
};

}  // namespace dtrun::straggler
