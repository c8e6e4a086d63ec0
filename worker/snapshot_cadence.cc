#include "worker/snapshot_cadence.h"

#include <algorithm>
#include <cmath>

namespace dtrun::worker {

double SnapshotCadence::estimated_cost() const {
  if (costs_held_ == 0) return 0;
  std::array<double, kWindow> sorted = costs_;  // the slots not yet held are +inf: they sort last
  std::sort(sorted.begin(), sorted.end());
  return sorted[costs_held_ / 2];
}

bool SnapshotCadence::Due(double step_seconds) {
  step_s_ = step_s_ == 0 ? step_seconds : 0.9 * step_s_ + 0.1 * step_seconds;
  ++steps_since_;
  if (forced_every_ > 0) {
    every_ = forced_every_;
  } else if (taken_ < 2) {
    every_ = 1;  // the first snapshot maps the slots; the second measures the cost
  } else if (const double cost = estimated_cost(); cost > 0 && step_s_ > 0) {
    const double wanted = std::clamp(std::ceil(cost / (budget_ * step_s_)), 1.0, double{kMaxEvery});
    every_ = std::min(static_cast<int>(wanted), growth_cap_);
  }
  return steps_since_ >= every_;
}

void SnapshotCadence::Measured(double seconds) {
  // The first write maps both slots: its cost says nothing about the next ones.
  if (taken_++ == 0) return;
  costs_[next_cost_] = seconds;
  next_cost_ = (next_cost_ + 1) % kWindow;
  costs_held_ = std::min(costs_held_ + 1, kWindow);
}

}  // namespace dtrun::worker
