// The client's side of its lease with the rendezvous service, without threads or a clock: when a
// keep-alive is due and whether it carries the node's status, what an answer means (go on, join
// again, give up: the service (master) is lost), and the outcome reports' retry delays.
// GrpcRoundSource drives it with the steady clock; tests drive it with made-up times.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"

namespace dtrun::rdzv {

class LeaseRules {
 public:
  using Clock = std::chrono::steady_clock;
  struct Config {
    std::chrono::milliseconds keep_alive_interval{1000};
    // Missed keep-alives in a row, over at least interval x this, before the service counts as lost.
    int keep_alive_max_attempt = 3;
    std::chrono::milliseconds status_push_interval{2000};
  };
  // What to do after a keep-alive's answer.
  enum class Next {
    kContinue,  // answered, or not yet missed keep_alive_max_attempt in a row over a lease
    kRejoin,    // the service forgot this node (NotFound): join again
    kStop,      // refused (a wrong token or certificate) or lost: LastVerdict() says why
    kEnd,       // this node left the job: no more keep-alives, and never a join again
  };

  LeaseRules(Config config, Clock::time_point joined_at);

  // When to send the next keep-alive: every interval, sooner when a waiting status is due.
  Clock::time_point NextDue(bool status_waiting) const;
  // Whether a waiting status goes with the keep-alive sent at `now`.
  bool StatusGoesAt(Clock::time_point now) const { return now >= last_status_push_ + config_.status_push_interval; }
  // A keep-alive was answered at `now` with `answer`; `with_status` if it carried the status.
  // `left`: the node left the job meanwhile (a stop, the job's end). Its answer is then no reason
  // to join again: the service forgot the node because it left.
  Next OnAnswer(const absl::Status& answer, Clock::time_point now, bool with_status, bool left = false);
  // Why kStop was returned; `endpoint` names the service.
  absl::Status Verdict(const std::string& endpoint) const;

  // How long the watch of the round may block: two keep-alive intervals, at least 2 s.
  static std::chrono::milliseconds WatchWait(std::chrono::milliseconds keep_alive_interval);
  // The delay before the `attempt`-th retry of an outcome report (1-based): 100 ms doubling to 2 s.
  static std::chrono::milliseconds ReportRetryDelay(int attempt);
  // The delay before the `attempt`-th watch after one failed (1-based; Unavailable, mostly):
  // 100 ms doubling to 1 s, gRPC's reconnect backoff here, so a service that is back is found
  // within about a second.
  static std::chrono::milliseconds WatchRetryDelay(int attempt);

 private:
  Config config_;
  int misses_ = 0;
  Clock::time_point last_ok_;
  Clock::time_point last_keep_alive_;
  Clock::time_point last_status_push_;
  absl::Status stop_;  // the answer that stopped it (kStop), or OK when lost by misses
  Clock::time_point stopped_at_;
};

}  // namespace dtrun::rdzv
