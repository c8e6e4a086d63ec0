#include "agent/hang_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dtrun {
namespace {

using Millis = std::chrono::milliseconds;

std::string Seconds(Millis ms) { return absl::StrFormat("%.1f s", ms.count() / 1000.0); }

}  // namespace

std::string DescribeHang(const progress::Hang& h) {
  std::string where = h.section.empty() ? "" : absl::StrCat(" in section '", h.section, "'");
  std::string step = h.step >= 0 ? absl::StrCat(", after step ", h.step) : ", before its first step";
  if (h.rule == "teardown") {
    return absl::StrCat("still exiting ", Seconds(h.stuck_for), " after its last step or a finished peer",
                        " (--teardown-timeout ", h.limit.count() / 1000.0, ")", step);
  }
  if (h.rule == "section") {
    return absl::StrCat("stuck", where, " for ", Seconds(h.stuck_for), " (--section-timeout ", h.section, "=",
                        h.limit.count() / 1000.0, ")", step);
  }
  return absl::StrCat("no progress report for ", Seconds(h.stuck_for), where, " (--heartbeat-timeout ",
                      h.limit.count() / 1000.0, ")", step);
}

std::string DescribeDState(const progress::Hang& h, const std::string& wchan) {
  return absl::StrCat("in uninterruptible sleep (D state) for at least ", Seconds(h.stuck_for),
                      wchan.empty() || wchan == "0" ? "" : absl::StrCat(" in ", wchan), " (--dstate-timeout ",
                      h.limit.count() / 1000.0, ")");
}

HangBlame BlameHang(int detected_local_rank, Millis limit, const std::vector<RankStacks>& stacks,
                    const std::vector<int64_t>& global_rank_of, int nodes) {
  std::vector<int> elsewhere, waiting;
  for (const RankStacks& s : stacks) {
    if (s.in_collective) (*s.in_collective ? waiting : elsewhere).push_back(s.local_rank);
  }
  HangBlame blame;
  blame.local_rank = detected_local_rank;
  if (!elsewhere.empty() && !waiting.empty()) {
    blame.local_rank = elsewhere[0];
    const size_t r = static_cast<size_t>(blame.local_rank);
    blame.note =
        absl::StrCat("; the stacks show rank ", r < global_rank_of.size() ? global_rank_of[r] : -1,
                     " outside torch.distributed while ", waiting.size(), " local rank(s) wait in a collective");
  }
  if (elsewhere.empty() && !waiting.empty() && nodes > 1) {
    blame.hold = std::clamp(limit / 4, Millis(1000), Millis(15000));
  }
  return blame;
}

Millis DStateTracker::interval() const { return std::clamp(timeout_ / 10, Millis(100), Millis(5000)); }

std::optional<DStateTracker::Clock::time_point> DStateTracker::Observe(pid_t pid, std::map<pid_t, uint64_t> sleeping,
                                                                       Clock::time_point now) {
  auto known = stuck_.find(pid);
  // Still stuck: in D at both looks, and not switched in between.
  std::map<pid_t, uint64_t> still;
  if (known != stuck_.end()) {
    for (const auto& [tid, switches] : sleeping) {
      auto before = known->second.threads.find(tid);
      if (before != known->second.threads.end() && before->second == switches) still.emplace(tid, switches);
    }
  }
  if (still.empty()) {
    if (sleeping.empty()) {
      stuck_.erase(pid);
    } else {
      stuck_[pid] = Stuck{now, std::move(sleeping)};
    }
    return std::nullopt;
  }
  known->second.threads = std::move(still);
  if (now - known->second.since < timeout_) return std::nullopt;
  return known->second.since;
}

}  // namespace dtrun
