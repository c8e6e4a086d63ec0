#include "straggler/straggler_watch.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace dtrun::straggler {

void StragglerWatch::Reset(int world) {
  judge_.Reset();
  last_seen_.assign(world > 1 ? static_cast<size_t>(world) : 0, -1);
  pending_.clear();
  judged_ = -1;
  named_rank_ = -1;
  named_since_ = -1;
}

absl::Status StragglerWatch::Observe(int rank, int64_t step, double wait_s, double step_s) {
  if (last_seen_.empty()) return absl::OkStatus();  // one rank: nobody to wait for
  if (rank < 0 || static_cast<size_t>(rank) >= last_seen_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in a job of ", last_seen_.size()));
  }
  if (!std::isfinite(wait_s) || !std::isfinite(step_s) || wait_s < 0 || step_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " step ", step, ": a negative or non-finite time"));
  }
  if (step <= last_seen_[rank] || step <= judged_) return absl::OkStatus();
  last_seen_[rank] = step;
  Pending& p = pending_[step];
  if (p.count == 0 || wait_s < p.min_s) {
    p.next_s = p.count == 0 ? std::numeric_limits<double>::infinity() : p.min_s;
    p.min_s = wait_s;
    p.min_rank = rank;
  } else if (wait_s < p.next_s) {
    p.next_s = wait_s;
  }
  p.step_s = std::max(p.step_s, step_s);
  if (++p.count == static_cast<int>(last_seen_.size())) {
    Judge(step, p);
  } else if (pending_.size() > kMaxPendingSteps) {
    pending_.erase(pending_.begin());
  }
  return absl::OkStatus();
}

void StragglerWatch::Judge(int64_t step, const Pending& p) {
  // Cannot fail: the step is after every judged one, the times were checked on the way in.
  judge_.Add(StepLead{step, p.min_rank, p.next_s - p.min_s, p.step_s}).IgnoreError();
  judged_ = step;
  const std::optional<Verdict> v = judge_.Current();
  const int rank = v ? v->rank : -1;
  if (rank != named_rank_) named_since_ = v ? step : -1;
  named_rank_ = rank;
  // Every rank has reported this step, and each reports its steps in order: an older step still
  // pending missed a report that will never come.
  pending_.erase(pending_.begin(), pending_.upper_bound(step));
}

}  // namespace dtrun::straggler
