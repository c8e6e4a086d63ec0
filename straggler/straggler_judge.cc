#include "straggler/straggler_judge.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrun::straggler {
namespace {

bool Usable(double seconds) { return std::isfinite(seconds) && seconds >= 0; }

// P(X >= n) for X ~ Binomial(k, p): how often chance alone makes one rank last in n of k steps.
// Each term's binomial coefficient comes from the one before, in logs (no std::lgamma: glibc's
// writes the global signgam, a race between judges on different threads).
double ChanceOfAtLeast(int n, int k, double p) {
  if (n <= 0) return 1;
  if (n > k || p <= 0) return 0;
  if (p >= 1) return 1;
  double log_choose = 0;  // log C(k, n)
  for (int j = 1; j <= n; ++j) log_choose += std::log(k - n + j) - std::log(j);
  double sum = 0;
  for (int i = n; i <= k; ++i) {
    sum += std::exp(log_choose + i * std::log(p) + (k - i) * std::log1p(-p));
    if (i < k) log_choose += std::log(k - i) - std::log(i + 1);  // C(k, i + 1) from C(k, i)
  }
  return std::min(sum, 1.0);
}

}  // namespace

absl::Status StragglerJudge::Add(const StepWaits& s) {
  if (s.wait_s.size() < 2) return absl::InvalidArgumentError("a step needs the waits of at least two ranks");
  if (world_ != 0 && s.wait_s.size() != world_) {
    return absl::InvalidArgumentError(absl::StrCat("step ", s.step, " has ", s.wait_s.size(), " ranks, the job ", world_));
  }
  if (s.step <= last_step_) {
    return absl::InvalidArgumentError(absl::StrCat("step ", s.step, " is not after step ", last_step_));
  }
  if (!Usable(s.step_s) || !std::all_of(s.wait_s.begin(), s.wait_s.end(), Usable)) {
    return absl::InvalidArgumentError(absl::StrCat("step ", s.step, " has a negative or non-finite time"));
  }
  // The smallest wait and the next: the last rank to arrive, and what it cost the others.
  int last = 0;
  for (size_t r = 1; r < s.wait_s.size(); ++r) {
    if (s.wait_s[r] < s.wait_s[last]) last = static_cast<int>(r);
  }
  double next = INFINITY;
  for (size_t r = 0; r < s.wait_s.size(); ++r) {
    if (static_cast<int>(r) != last) next = std::min(next, s.wait_s[r]);
  }
  world_ = s.wait_s.size();
  return Add(StepLead{s.step, last, next - s.wait_s[last], s.step_s});
}

absl::Status StragglerJudge::Add(const StepLead& s) {
  if (s.step <= last_step_) {
    return absl::InvalidArgumentError(absl::StrCat("step ", s.step, " is not after step ", last_step_));
  }
  if (s.last_rank < 0 || !Usable(s.lead_s) || !Usable(s.step_s)) {
    return absl::InvalidArgumentError(absl::StrCat("step ", s.step, " has no last rank or a negative or non-finite time"));
  }
  last_step_ = s.step;
  const double margin = std::max(options_.margin_fraction * s.step_s, options_.margin_floor_s);
  window_.push_back(Seen{s.lead_s >= margin ? s.last_rank : -1, s.via, s.lead_s, s.step_s});
  if (window_.size() > static_cast<size_t>(options_.window)) window_.pop_front();
  current_ = Decide();
  return absl::OkStatus();
}

std::optional<Verdict> StragglerJudge::Current() const { return current_; }

std::optional<Verdict> StragglerJudge::Decide() const {
  const size_t decide_from = options_.decide_from > 0 ? options_.decide_from : options_.window;
  if (window_.size() < std::min(decide_from, static_cast<size_t>(options_.window))) return std::nullopt;
  std::map<int, int> last_in;
  int with_last = 0;  // steps in which some rank was last by the margin
  double step_s = 0;
  for (const Seen& s : window_) {
    step_s += s.step_s;
    if (s.last >= 0) {
      ++last_in[s.last];
      ++with_last;
    }
  }
  const double steps = static_cast<double>(window_.size());
  auto verdict = [&](int rank, int n) {
    double caused = 0;
    std::map<int, int> via;
    for (const Seen& s : window_) {
      if (s.last != rank) continue;
      caused += s.caused_s;
      if (s.via >= 0) ++via[s.via];
    }
    int via_most = 0;
    for (const auto& [v, k] : via) via_most = std::max(via_most, k);
    return Verdict{rank, n, static_cast<int>(window_.size()), step_s > 0 ? caused / step_s : 0, via_most};
  };
  auto last_more_than_any_other = [&](int rank, int n) {
    for (const auto& [other, m] : last_in) {
      if (other != rank && m >= n) return false;
    }
    return true;
  };
  const double chance = chance_ > 0 ? chance_ : world_ > 0 ? 1.0 / static_cast<double>(world_) : 0.5;
  // With `alpha_over_all`, the bars are shared by the 1/chance ranks that could reach them.
  const double share = options_.alpha_over_all ? chance : 1;
  // The rank named now keeps its name at the lower bars while it is still the one most often last;
  // another needs the majority, in a count that chance alone would rarely give, and to have cost
  // enough. Counts are tried from the largest: a smaller one that chance gives too often stops it.
  if (current_) {
    auto it = last_in.find(current_->rank);
    if (it != last_in.end() && it->second >= options_.keep * steps && last_more_than_any_other(it->first, it->second) &&
        (options_.keep_alpha >= 1 || ChanceOfAtLeast(it->second, with_last, chance) < options_.keep_alpha * share)) {
      return verdict(it->first, it->second);
    }
  }
  std::vector<std::pair<int, int>> by_count;  // (count, rank)
  for (const auto& [rank, n] : last_in) by_count.emplace_back(n, rank);
  std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (const auto& [n, rank] : by_count) {
    if (n < options_.majority * steps || ChanceOfAtLeast(n, with_last, chance) >= options_.alpha * share) break;
    Verdict v = verdict(rank, n);
    if (v.cost_share >= options_.min_cost_share) return v;
  }
  return std::nullopt;
}

void StragglerJudge::Reset(double chance) {
  current_.reset();
  window_.clear();
  world_ = 0;
  chance_ = std::isfinite(chance) && chance > 0 && chance <= 1 ? chance : 0;
  last_step_ = -1;
}

}  // namespace dtrun::straggler
