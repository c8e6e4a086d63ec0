// Lines up the ranks' all-reduce waits step by step and feeds the judge (issue 24). Waits arrive
// per rank, in batches, from the agents' status pushes: a step is judged once every rank of the
// round has reported it. Only each pending step's smallest two waits are kept, so memory is
// O(ranks + pending steps), whatever the job's size. Plain logic; not thread-safe.
//
// Nodes too: when every rank of a node is slow (a throttled host, a noisy neighbour), the last
// arrival moves between its ranks and no single rank is last in most steps. With the ranks'
// nodes given, a second judge looks at each step's smallest wait against the smallest on any
// other node, and names the node -- at higher bars than a rank (a node of two ranks is last by
// chance twice as often), and only when no one rank of it makes most of its lead (a slowed rank
// makes its node last too, and the node judge would otherwise name it first).
//
// And slowly: a throttled host's ranks were last by the margin in about half the steps that had a
// last rank -- twice a node's chance among four, but under the window's majority, so the judges
// above named it in 1 of 8 trials (docs/BENCHMARKS.md). Two more judges, of nodes and of ranks,
// look at the last 10 windows with no majority, for a count chance gives any node or rank less
// than 0.01% of the time: they name what the first two did not, later. Nodes come first
// there: a throttled host's own ranks reach counts that chance rarely gives too.
//
// And links: one late rank makes every other rank wait alike, for its arrival. When the ranks
// that are not named wait unevenly instead -- their mean waits spread over most of the named
// rank's lead on them, and over half their own level -- the collective itself is slow somewhere
// along its path (a slow link: the
// rank just downstream of it arrives last at the next step, having finished the last one late).
// That is said as a slow link near the named rank's node, not as a slow rank. It needs the mean
// waits of three or more other ranks; with fewer it cannot tell, and names the rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "straggler/straggler_judge.h"

namespace dtrun::straggler {

// What holds the job back, as the waits tell it.
enum class Culprit {
  kRank,  // one rank arrives last
  kNode,  // the ranks of one node take turns at arriving last
  kLink,  // one rank arrives last, but the others wait unevenly: the collective's path is slow
};

struct Finding {
  Culprit culprit = Culprit::kRank;
  int rank = -1;  // kRank, kLink: the rank that arrives last; kNode: -1
  int node = -1;  // the node of it (kNode: the slow node), as Reset was told; -1: not told
  Verdict verdict;
};

class StragglerWatch {
 public:
  // A link when the others' mean waits spread (10th to 90th percentile) over both this share of
  // the named rank's lead on their median and this share of the median itself. Measured on the
  // namespace cluster (docs/BENCHMARKS.md): a slowed rank or node reaches 0.74 and 0.27, a slow
  // link 0.98 and 0.78 at least.
  static constexpr double kUnevenShare = 0.85;
  static constexpr double kUnevenLevel = 0.5;
  // The node judge's bars (JudgeOptions::majority, keep): clean runs put one of 4 nodes last by
  // the margin in up to 9 of 20 steps, a throttled node in 12 within its first 20.
  static constexpr double kNodeMajority = 0.6;
  static constexpr double kNodeKeep = 0.4;
  // A node verdict one rank of the node makes in this share of its steps is that rank's.
  static constexpr double kOneRankShare = 0.8;
  // The sustained judges: windows of this many of the first judges' windows, a count chance gives
  // any rank (node) less often than this. Over 3,300 clean steps on the namespace cluster the
  // rarest count was one chance gives some rank 6 times in 1,000 (costing 0.6% of the step time).
  static constexpr int kSustainedWindows = 10;
  static constexpr double kSustainedAlpha = 1e-4;
  // Steps waiting for their last rank's report; older ones are dropped first.
  static constexpr size_t kMaxPendingSteps = 256;
  // Jobs of more ranks are not watched (24 bytes a rank).
  static constexpr int kMaxRanks = 1 << 20;

  explicit StragglerWatch(JudgeOptions options = {})
      : judge_(options),
        node_judge_(ForNodes(options)),
        sustained_(Sustained(options)),
        sustained_node_(Sustained(ForNodes(options))),
        window_(std::max(options.window, 1)) {}

  // A new round of `world` ranks: nothing of the last round counts. Fewer than two ranks: nothing
  // is judged. `node_of_rank` (by rank, world entries; else ignored) lets whole nodes be named.
  void Reset(int world, std::vector<int> node_of_rank = {});
  // Rank `rank` waited `wait_s` inside step `step`'s gradient all-reduce, in a step of `step_s`.
  // A rank's steps must rise (a repeat is ignored: pushes may be resent). InvalidArgument for a rank
  // out of range or a negative or non-finite time; nothing changes then.
  absl::Status Observe(int rank, int64_t step, double wait_s, double step_s);

  // What is named now: a rank, else a node, else (by the sustained judges) a node, else a rank; a
  // rank or node whose named lead the others' uneven waits explain better is a link.
  std::optional<Finding> Named() const;
  // The rank judges' verdict (the first's, else the sustained one's), before links are told from ranks.
  std::optional<Verdict> Current() const { return judge_.Current() ? judge_.Current() : sustained_.Current(); }
  // The node holding the job back (Verdict::rank is the node's index in `node_of_rank`), judged
  // from the lead of each step's last node over the next; nullopt without nodes or verdict, or
  // when one rank of the node makes most of its lead.
  std::optional<Verdict> CurrentNode() const {
    std::optional<Verdict> v = NodeVerdict(node_judge_);
    return v ? v : NodeVerdict(sustained_node_);
  }
  int world() const { return static_cast<int>(ranks_.size()); }
  int64_t judged_step() const { return judged_; }  // the newest step judged (-1: none)
  // The step whose judgement first named what Named() says now (the same rank or node, told
  // apart from a link the same way), without a break since (-1: none).
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
  struct RankTrack {
    int64_t last_seen = -1;  // its newest step observed
    double mean_wait_s = 0;  // over its last `window` steps or so (a running mean, then moving)
    int samples = 0;         // up to the window
  };
  static JudgeOptions ForNodes(JudgeOptions o) {
    o.majority = std::max(o.majority, kNodeMajority);
    o.keep = std::max(o.keep, kNodeKeep);
    return o;
  }
  // No majority, but a count chance gives any rank rarely, and a cost no smaller than the first
  // judge's majority of steps at its margin; kept while chance gives any rank the count as rarely
  // as the first judge needs of one rank to name it.
  static JudgeOptions Sustained(JudgeOptions o) {
    o.min_cost_share = o.majority * o.margin_fraction;
    o.decide_from = std::max(o.window, 1);
    o.window = o.decide_from * kSustainedWindows;
    o.majority = 0;
    o.keep = 0;
    o.keep_alpha = o.alpha;
    o.alpha = std::min(o.alpha, kSustainedAlpha);
    o.alpha_over_all = true;
    return o;
  }
  void Judge(int64_t step, const Pending& p);
  // A node judge's verdict, unless one rank of the node makes it.
  std::optional<Verdict> NodeVerdict(const StragglerJudge& judge) const;
  // Whether the ranks other than `named` (a rank, or -2 - node) wait unevenly; see kUnevenShare.
  bool OthersWaitUnevenly(int named) const;

  StragglerJudge judge_;
  StragglerJudge node_judge_;
  StragglerJudge sustained_;
  StragglerJudge sustained_node_;
  int window_;
  std::vector<int> node_of_rank_;
  std::vector<RankTrack> ranks_;  // by rank
  std::map<int64_t, Pending> pending_;
  int64_t judged_ = -1;
  int named_ = -1;  // who is named: a rank, or -2 - node; -1: nobody
  std::optional<Verdict> verdict_;  // ...and the verdict that named it
  bool link_ = false;             // ...and whether the others' waits make it a link
  int64_t next_link_look_ = -1;  // the step from which to look at the others' waits again
  int64_t named_since_ = -1;
};

}  // namespace dtrun::straggler
