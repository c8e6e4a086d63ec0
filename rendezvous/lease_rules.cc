#include "rendezvous/lease_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dtrun::rdzv {

LeaseRules::LeaseRules(Config config, Clock::time_point joined_at)
    : config_(config), last_ok_(joined_at), last_keep_alive_(joined_at), last_status_push_() {}

LeaseRules::Clock::time_point LeaseRules::NextDue(bool status_waiting) const {
  const Clock::time_point keep_alive_due = last_keep_alive_ + config_.keep_alive_interval;
  if (!status_waiting) return keep_alive_due;
  return std::min(keep_alive_due, last_status_push_ + config_.status_push_interval);
}

LeaseRules::Next LeaseRules::OnAnswer(const absl::Status& answer, Clock::time_point now, bool with_status, bool left) {
  if (left) return Next::kEnd;
  last_keep_alive_ = now;
  if (with_status) last_status_push_ = now;
  if (answer.ok()) {
    misses_ = 0;
    last_ok_ = now;
    return Next::kContinue;
  }
  if (answer.code() == absl::StatusCode::kNotFound) return Next::kRejoin;
  if (answer.code() == absl::StatusCode::kUnauthenticated || answer.code() == absl::StatusCode::kPermissionDenied) {
    stop_ = answer;
    return Next::kStop;
  }
  // Lost after max_attempt misses in a row that span a whole lease, as the service counts a
  // node's: keep-alives sent sooner (a status that was due) do not shorten it.
  ++misses_;
  if (misses_ < config_.keep_alive_max_attempt ||
      now - last_ok_ < config_.keep_alive_interval * config_.keep_alive_max_attempt) {
    return Next::kContinue;
  }
  stopped_at_ = now;
  return Next::kStop;
}

absl::Status LeaseRules::Verdict(const std::string& endpoint) const {
  if (!stop_.ok()) return stop_;
  const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(stopped_at_ - last_ok_);
  // A master started again within this silence would have been joined again (Rejoin): say how to
  // give a supervisor's restart longer.
  return absl::UnavailableError(
      absl::StrCat("lost the rendezvous service (master) at ", endpoint, ": no answer for ", silent.count() / 1000.0,
                   " s (", misses_,
                   " keep-alives missed); stopping this node. A master started again in that time is joined again; "
                   "--rdzv-conf keep_alive_max_attempt=N gives it longer"));
}

std::chrono::milliseconds LeaseRules::WatchWait(std::chrono::milliseconds keep_alive_interval) {
  return std::max(keep_alive_interval * 2, std::chrono::milliseconds(2000));
}

static std::chrono::milliseconds Doubling(int attempt, std::chrono::milliseconds cap) {
  const int doublings = std::clamp(attempt - 1, 0, 5);  // 100 ms << 5 is past either cap
  return std::min(std::chrono::milliseconds(100 << doublings), cap);
}

std::chrono::milliseconds LeaseRules::ReportRetryDelay(int attempt) {
  return Doubling(attempt, std::chrono::seconds(2));
}

std::chrono::milliseconds LeaseRules::WatchRetryDelay(int attempt) {
  return Doubling(attempt, std::chrono::seconds(1));
}

}  // namespace dtrun::rdzv
