#include "straggler/straggler_watch.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace dtrun::straggler {

void StragglerWatch::Reset(int world, std::vector<int> node_of_rank) {
  judge_.Reset();
  node_judge_.Reset();
  last_seen_.assign(world > 1 ? static_cast<size_t>(world) : 0, -1);
  const bool fits = static_cast<int>(node_of_rank.size()) == world &&
                    std::all_of(node_of_rank.begin(), node_of_rank.end(), [](int n) { return n >= 0; });
  node_of_rank_ = fits ? std::move(node_of_rank) : std::vector<int>{};
  pending_.clear();
  judged_ = -1;
  named_ = -1;
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
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // With nodes: whether this wait and the smallest so far are on different nodes.
  const bool other_node = p.count > 0 && !node_of_rank_.empty() && node_of_rank_[rank] != node_of_rank_[p.min_rank];
  if (p.count == 0 || wait_s < p.min_s) {
    p.next_s = p.count == 0 ? kNone : p.min_s;
    // The old smallest becomes the smallest on another node, or that stays what it was.
    p.other_node_s = p.count == 0 ? kNone : other_node ? p.min_s : p.other_node_s;
    p.min_s = wait_s;
    p.min_rank = rank;
  } else {
    p.next_s = std::min(p.next_s, wait_s);
    if (other_node) p.other_node_s = std::min(p.other_node_s, wait_s);
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
  if (!node_of_rank_.empty() && std::isfinite(p.other_node_s)) {
    node_judge_.Add(StepLead{step, node_of_rank_[p.min_rank], p.other_node_s - p.min_s, p.step_s}).IgnoreError();
  }
  judged_ = step;
  const std::optional<Verdict> rank = judge_.Current();
  const std::optional<Verdict> node = rank ? std::nullopt : node_judge_.Current();
  const int named = rank ? rank->rank : node ? -2 - node->rank : -1;
  if (named != named_) named_since_ = named == -1 ? -1 : step;
  named_ = named;
  // Every rank has reported this step, and each reports its steps in order: an older step still
  // pending missed a report that will never come.
  pending_.erase(pending_.begin(), pending_.upper_bound(step));
}

}  // namespace dtrun::straggler
