#include "agent/recovery_tracker.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dtrun {
namespace {

std::chrono::milliseconds Since(RecoveryTracker::Clock::time_point from, RecoveryTracker::Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from);
}

}  // namespace

void RecoveryTracker::OnFailure(Clock::time_point at, int64_t step_before) {
  if (failed_at_) return;
  failed_at_ = at;
  r_ = Recovery{};
  r_.step_before = step_before;
  started_ = false;
}

void RecoveryTracker::OnStopped(Clock::time_point at) {
  if (failed_at_ && !started_) r_.stopped = Since(*failed_at_, at);
}

void RecoveryTracker::OnStarted(Clock::time_point at, int nproc_per_node) {
  if (!failed_at_) return;
  started_ = true;
  r_.started = Since(*failed_at_, at);
  restored_.assign(static_cast<size_t>(std::max(nproc_per_node, 0)), -2);
  stepped_.assign(restored_.size(), false);
}

void RecoveryTracker::OnRestored(int local_rank, const std::string& source, int64_t step, Clock::time_point at) {
  if (!failed_at_ || !started_ || local_rank < 0 || local_rank >= static_cast<int>(restored_.size())) return;
  if (restored_[local_rank] != -2) return;
  restored_[local_rank] = step;
  if (std::none_of(restored_.begin(), restored_.end(), [](int64_t s) { return s == -2; })) {
    r_.restored = Since(*failed_at_, at);
  }
  if (local_rank == 0 || r_.restored_step < 0) {
    r_.source = source;
    r_.restored_step = step;
  }
}

std::optional<Recovery> RecoveryTracker::OnStep(int local_rank, int64_t step, Clock::time_point at) {
  if (!failed_at_ || !started_ || local_rank < 0 || local_rank >= static_cast<int>(stepped_.size())) {
    return std::nullopt;
  }
  // A worker that never said what it restored counts from its first heartbeat.
  if (step > restored_[local_rank]) stepped_[local_rank] = true;
  if (std::find(stepped_.begin(), stepped_.end(), false) != stepped_.end()) return std::nullopt;
  r_.stepping = Since(*failed_at_, at);
  if (r_.restored.count() == 0) r_.restored = r_.stepping;
  failed_at_.reset();
  completed_.push_back(r_);
  return r_;
}

std::string FormatRecoveries(const std::vector<Recovery>& done) {
  if (done.empty()) return "";
  std::map<std::string, int> sources;
  int64_t lost = 0;
  std::vector<double> seconds;
  for (const Recovery& r : done) {
    ++sources[r.source];
    lost += r.lost_steps();
    seconds.push_back(static_cast<double>(r.stepping.count()) / 1000);
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  std::string from;
  for (const auto& [source, count] : sources) absl::StrAppend(&from, from.empty() ? "" : ", ", source, " ", count);
  return absl::StrFormat(
      "recoveries on this node: %d (%s); %d step(s) of work lost in all; every local rank stepping again "
      "%.2f s after a failure (median), %.2f s at most",
      n, from, lost, median, seconds.back());
}

}  // namespace dtrun
