// How often a trainer takes an in-memory snapshot (docs/DESIGN.md, "Cadence"): every k-th step,
// k chosen so that snapshots cost at most a budget of the step time, from the costs measured.
//
// The estimate is the median of the last few costs, not a running mean: a snapshot's cost
// includes the replica check's all-reduce, whose wait is mostly other ranks' scheduling, and one
// slow wait early in a run (measured: 174 ms against a usual 5-15 ms on 8 ranks over 2 cores) made
// the mean ask for every 38 steps, so a node lost in the first minute had nothing newer than step
// 2 on its buddy. The interval also grows at most twofold per snapshot, so the first snapshots
// come often while the estimate settles.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

namespace dtrun::worker {

class SnapshotCadence {
 public:
  static constexpr int kMaxEvery = 10000;
  // `budget`: the share of the step time snapshots may take. `forced_every` > 0: every that many
  // steps (--snapshot-every), whatever the cost.
  SnapshotCadence(double budget, int forced_every) : budget_(budget), forced_every_(forced_every) {}

  // Called after every optimizer step with its duration: whether a snapshot is due now.
  bool Due(double step_seconds);
  // A snapshot begins (the steps until the next one count from here).
  void Began() {
    steps_since_ = 0;
    growth_cap_ = 2 * every_;
  }
  // A snapshot was completed at a cost of `seconds` to training.
  void Measured(double seconds);

  int every() const { return every_; }
  void set_budget(double budget) { budget_ = budget; }
  double step_seconds() const { return step_s_; }
  // The cost the interval is chosen from (0 until one was measured).
  double estimated_cost() const;

 private:
  static constexpr int kWindow = 5;
  static constexpr double kNone = std::numeric_limits<double>::infinity();

  double budget_;
  int forced_every_;
  int every_ = 1;
  int growth_cap_ = 1;  // twice the interval that led to the last snapshot
  int64_t steps_since_ = 0;
  double step_s_ = 0;  // moving average of the step time
  int64_t taken_ = 0;
  // The last measured costs (the first snapshot's is not one); +inf where none is held yet.
  std::array<double, kWindow> costs_{kNone, kNone, kNone, kNone, kNone};
  int costs_held_ = 0;
  int next_cost_ = 0;
};

}  // namespace dtrun::worker
