#include "straggler/straggler_watch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"

namespace dtrun::straggler {

void StragglerWatch::Reset(int world, std::vector<int> node_of_rank) {
  ranks_.assign(world > 1 ? static_cast<size_t>(world) : 0, RankTrack{});
  const bool fits = static_cast<int>(node_of_rank.size()) == world &&
                    std::all_of(node_of_rank.begin(), node_of_rank.end(), [](int n) { return n >= 0; });
  node_of_rank_ = fits ? std::move(node_of_rank) : std::vector<int>{};
  judge_.Reset(world > 1 ? 1.0 / world : 0);
  sustained_.Reset(world > 1 ? 1.0 / world : 0);
  // A node is last by chance as often as its share of the ranks: the largest node's share.
  std::map<int, int> ranks_of_node;
  int largest = 0;
  for (int node : node_of_rank_) largest = std::max(largest, ++ranks_of_node[node]);
  node_judge_.Reset(node_of_rank_.empty() ? 0 : static_cast<double>(largest) / world);
  sustained_node_.Reset(node_of_rank_.empty() ? 0 : static_cast<double>(largest) / world);
  pending_.clear();
  judged_ = -1;
  named_ = -1;
  verdict_.reset();
  link_ = false;
  next_link_look_ = -1;
  named_since_ = -1;
}

absl::Status StragglerWatch::Observe(int rank, int64_t step, double wait_s, double step_s) {
  if (ranks_.empty()) return absl::OkStatus();  // one rank: nobody to wait for
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in a job of ", ranks_.size()));
  }
  if (!std::isfinite(wait_s) || !std::isfinite(step_s) || wait_s < 0 || step_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " step ", step, ": a negative or non-finite time"));
  }
  RankTrack& track = ranks_[rank];
  if (step <= track.last_seen || step <= judged_) return absl::OkStatus();
  track.last_seen = step;
  track.samples = std::min(track.samples + 1, window_);
  track.mean_wait_s += (wait_s - track.mean_wait_s) / track.samples;
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
  if (++p.count == static_cast<int>(ranks_.size())) {
    Judge(step, p);
  } else if (pending_.size() > kMaxPendingSteps) {
    pending_.erase(pending_.begin());
  }
  return absl::OkStatus();
}

void StragglerWatch::Judge(int64_t step, const Pending& p) {
  // Cannot fail: the step is after every judged one, the times were checked on the way in.
  const StepLead rank_lead{step, p.min_rank, p.next_s - p.min_s, p.step_s};
  judge_.Add(rank_lead).IgnoreError();
  sustained_.Add(rank_lead).IgnoreError();
  if (!node_of_rank_.empty() && std::isfinite(p.other_node_s)) {
    const StepLead node_lead{step, node_of_rank_[p.min_rank], p.other_node_s - p.min_s, p.step_s, p.min_rank};
    node_judge_.Add(node_lead).IgnoreError();
    sustained_node_.Add(node_lead).IgnoreError();
  }
  judged_ = step;
  // A rank, else a node; then the sustained judges, nodes first (see the header).
  int named = -1;
  std::optional<Verdict> verdict;
  for (const auto& [judge, of_nodes] : {std::pair{&judge_, false}, std::pair{&node_judge_, true},
                                        std::pair{&sustained_node_, true}, std::pair{&sustained_, false}}) {
    verdict = of_nodes ? NodeVerdict(*judge) : judge->Current();
    if (verdict) {
      named = of_nodes ? -2 - verdict->rank : verdict->rank;
      break;
    }
  }
  // The others' waits are looked at when a name is given, then once a window: they are means over
  // the window, and the look walks every rank.
  bool link = named != -1 && link_;
  if (named != -1 && (named != named_ || step >= next_link_look_)) {
    link = OthersWaitUnevenly(named);
    next_link_look_ = step + window_;
  }
  if (named != named_ || link != link_) named_since_ = named == -1 ? -1 : step;
  named_ = named;
  verdict_ = verdict;
  link_ = link;
  // Every rank has reported this step, and each reports its steps in order: an older step still
  // pending missed a report that will never come.
  pending_.erase(pending_.begin(), pending_.upper_bound(step));
}

bool StragglerWatch::OthersWaitUnevenly(int named) const {
  std::vector<double> others;
  double named_sum = 0;
  int named_count = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (ranks_[r].samples == 0) continue;
    const bool is_named = named >= 0 ? static_cast<int>(r) == named : node_of_rank_[r] == -2 - named;
    if (is_named) {
      named_sum += ranks_[r].mean_wait_s;
      ++named_count;
    } else {
      others.push_back(ranks_[r].mean_wait_s);
    }
  }
  if (others.size() < 3 || named_count == 0) return false;  // too few to tell
  // Nearest ranks, rounded outwards: with a handful of ranks, the 10th to 90th is the range.
  auto at = [&](double q, double (*round)(double)) {
    const auto i = static_cast<std::ptrdiff_t>(round(q * static_cast<double>(others.size() - 1)));
    std::nth_element(others.begin(), others.begin() + i, others.end());
    return others[static_cast<size_t>(i)];
  };
  const double median = at(0.5, std::floor);
  const double lead = median - named_sum / named_count;
  const double spread = at(0.9, std::ceil) - at(0.1, std::floor);
  return lead > 0 && spread >= kUnevenShare * lead && spread >= kUnevenLevel * median;
}

std::optional<Finding> StragglerWatch::Named() const {
  if (named_ == -1) return std::nullopt;
  if (named_ >= 0) return Finding{link_ ? Culprit::kLink : Culprit::kRank, named_, NodeOf(named_), *verdict_};
  return Finding{link_ ? Culprit::kLink : Culprit::kNode, -1, -2 - named_, *verdict_};
}

std::optional<Verdict> StragglerWatch::NodeVerdict(const StragglerJudge& judge) const {
  std::optional<Verdict> v = judge.Current();
  if (v && v->via_most >= kOneRankShare * v->last_in) return std::nullopt;
  return v;
}

}  // namespace dtrun::straggler
