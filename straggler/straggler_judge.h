// Naming the rank that makes a DDP job wait (issue 24; plain logic, no sockets, no clock).
//
// Under DDP every rank leaves a step's all-reduce together, so per-rank step times cannot tell who
// is slow. What differs is how long each rank waited inside the collective: the last to arrive
// waits least. That needs no clock shared between nodes. Sorting a step's waits, the gap between
// the smallest and the next is what the last rank cost everyone that step: had it arrived with the
// second-last, every rank would have waited that much less.
//
// A rank is named when, over a full window of recent steps, it was the last by a margin in half of
// them, and stays named while it is in `keep` of them and no other rank is last as often (so a
// verdict does not flap as the share wavers around the bar). The margin is a share of the step
// time with a floor in seconds, so ordinary jitter, where a different rank is last each step by a
// little, never names anyone. Measured on a noisy 2-core box (docs/BENCHMARKS.md): clean runs of
// 4 ranks on 4 nodes reach at most 5 of 20 steps for one rank, a throttled node's ranks 7 each, a
// rank slowed by 30% 10 within 9-16 steps.
//
// Jitter larger than the margin is another matter: two ranks training on two busy cores take
// turns, each last by the margin in about half the steps, and half is the bar. So the count must
// also be one that chance alone would give less than `alpha` of the time, with each of the N
// ranks last in 1/N of the steps that have a last rank: with 2 ranks, 18 of 20 such steps (or 10
// of 10).
//
// The same judge over a long window, with no majority and a smaller `alpha`, names a rank that is
// last more often than chance gives but in fewer than half the steps (StragglerWatch's sustained
// judges): a verdict may then come before the window is full (`decide_from`), needs the rank to
// have cost a share of the step time (`min_cost_share`), and is kept only while chance still
// rarely gives the count (`keep_alpha`). Without a majority any of the N ranks may reach the bar,
// so there `alpha` bounds how often chance gives the count to any of them (`alpha_over_all`: a
// rank's own count must be N times rarer).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace dtrun::straggler {

struct JudgeOptions {
  int window = 20;                 // steps looked at
  int decide_from = 0;             // steps seen before any verdict (0: a full window)
  double majority = 0.5;           // share of the window's steps a rank must be last in
  double keep = 0.3;               // share that keeps a rank named once it is
  double alpha = 0.001;            // how rarely chance may give a named rank's count
  double keep_alpha = 1;           // ...and the count that keeps the name (1: any count)
  bool alpha_over_all = false;     // the alphas bound how often chance gives any rank its count
  double min_cost_share = 0;       // of the window's step time: a rank that cost less is not named
  double margin_fraction = 0.05;   // of the step time: a smaller lead is not "last"
  double margin_floor_s = 0.002;
};

// One step as the ranks reported it: each rank's wait inside the step's gradient all-reduce(s),
// and the step's duration (any rank's: under DDP they agree to within the waits).
struct StepWaits {
  int64_t step = 0;
  std::vector<double> wait_s;  // by global rank; every rank of the job
  double step_s = 0;
};

// The same step boiled down to what the judge keeps: who arrived last, and by how much before the
// next rank (what a caller that cannot hold every rank's wait at once passes; see StragglerWatch).
struct StepLead {
  int64_t step = 0;
  int last_rank = -1;  // the rank with the smallest wait (for a judge of nodes: its node)
  double lead_s = 0;   // the next-smallest wait minus the smallest
  double step_s = 0;
  int via = -1;        // for a judge of nodes: the rank of it that was last (-1: not said)
};

struct Verdict {
  int rank = -1;
  int last_in = 0;          // steps of the window in which it was last by the margin
  int window = 0;
  double cost_share = 0;    // the wait it caused, as a share of the window's step time
  int via_most = 0;         // of `last_in`: the most steps due to one `via` (0: none said)
};

class StragglerJudge {
 public:
  explicit StragglerJudge(JudgeOptions options = {}) : options_(options) {}

  // Adds a step. InvalidArgument (and nothing changed) for a step that does not fit: a world size
  // other than the first step's, a negative or non-finite time, a step not after the last one.
  absl::Status Add(const StepWaits& step);
  // Adds a step already reduced to its lead. InvalidArgument (and nothing changed) for a negative
  // rank, a negative or non-finite time, or a step not after the last one.
  absl::Status Add(const StepLead& lead);
  // The rank holding the job back now, if any.
  std::optional<Verdict> Current() const;
  // Forgets the window (a new round: other ranks, another layout). `chance`: the share of the
  // steps with a last rank that one rank is last in by chance, 1/N for N ranks; 0: not known (the
  // first StepWaits' world size says it, else 1/2, the most cautious).
  void Reset(double chance = 0);

 private:
  std::optional<Verdict> Decide() const;

  struct Seen {
    int last = -1;  // the rank that was last by the margin (-1: none)
    int via = -1;
    double caused_s = 0;
    double step_s = 0;
  };
  JudgeOptions options_;
  std::deque<Seen> window_;
  size_t world_ = 0;
  double chance_ = 0;
  int64_t last_step_ = -1;
  std::optional<Verdict> current_;
};

}  // namespace dtrun::straggler
