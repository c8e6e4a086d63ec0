// What this node's workers have reported in the current attempt, and the hang rules applied to
// it. Pure logic: the agent feeds it parsed reports and the time, and asks whether a rank hangs
// and when to look again (no clock of its own, no I/O). Not thread-safe.
//
// Hang rules (docs/DESIGN.md, "Hang detection"), for a rank that has sent a heartbeat or a
// section (a hello alone arms nothing: start-up may take long before the first step):
//   - inside a section that has its own timeout, the innermost such section rules: the rank hangs
//     when that section has been open longer than its timeout;
//   - otherwise, once the rank is tearing down — it reported its last step (of the total it
//     announced), or a worker of its group has exited successfully — the heartbeat rule yields
//     to the teardown bound: it hangs when its teardown has lasted longer than that (an exiting
//     rank sends no heartbeats, and destroying a process group on a busy machine is slow);
//   - otherwise the rank hangs when its last report is older than the heartbeat timeout.
// A long checkpoint therefore needs its own timeout, and gets it without raising the step's.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "progress/report_protocol.h"

namespace dtrun::progress {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

struct HangPolicy {
  std::optional<Millis> heartbeat_timeout;  // --heartbeat-timeout
  std::map<std::string, Millis> section_timeouts;  // --section-timeout NAME=SECONDS
  std::optional<Millis> teardown_timeout = Millis(300000);  // --teardown-timeout (nullopt: no bound)
  bool enabled() const { return heartbeat_timeout || !section_timeouts.empty(); }
};

struct OpenSection {
  std::string name;
  Clock::time_point since;
};

// One step's wait inside the gradient all-reduce (a `sync` report).
struct SyncWait {
  int64_t step = 0;
  double wait_s = 0;
  double step_s = 0;
};
inline constexpr size_t kMaxRecentWaits = 64;

struct RankProgress {
  bool reported = false;   // anything, a hello included
  bool active = false;     // a heartbeat or a section: the hang rules apply
  Clock::time_point last_report;
  int64_t step = -1;      // last step reported (-1: none)
  int64_t samples = -1;   // last sample count reported (-1: none)
  std::vector<OpenSection> sections;  // outermost first; at most kMaxOpenSections
  std::string lang;
  int stack_signal = 0;
  bool warm = false;       // its program may be started parked (worker/warm_start.h)
  // In-memory snapshots: the newest one this worker completed, and what it resumed from.
  int64_t snapshot_step = -1;
  int64_t snapshot_bytes = 0;
  int64_t snapshot_micros = 0;
  int64_t kept_step = -1;  // the state it kept on its way out after a failure (-1: none)
  std::string restored_source;  // memory | disk | none ("" until reported)
  int64_t restored_step = -1;
  std::deque<SyncWait> waits;  // its newest sync reports, steps rising, at most kMaxRecentWaits
  double steps_per_s = 0;    // over the last rate window
  double samples_per_s = 0;
  // The start of the current rate window.
  Clock::time_point window_start;
  int64_t window_step = -1, window_samples = -1;
};

struct Hang {
  int local_rank = 0;
  std::string section;   // the section it is stuck in ("" if none)
  int64_t step = -1;     // the last step it reported
  Millis stuck_for{0};   // how long: since its last report, or since the section began
  Millis limit{0};       // the timeout that was passed
  std::string rule;      // "heartbeat", "section" or "teardown"
};

inline constexpr size_t kMaxOpenSections = 8;

class ProgressBoard {
 public:
  explicit ProgressBoard(int nproc_per_node) : ranks_(nproc_per_node) {}

  // A report from `local_rank` (in range; the caller identified the sender).
  void Apply(int local_rank, const Report& report, Clock::time_point now);

  // The first rank (lowest local rank) that breaks a rule at `now`. `group_done` is when a worker
  // of the group first exited successfully (the others are then tearing down), if one has.
  std::optional<Hang> FindHang(const HangPolicy& policy, Clock::time_point now,
                               std::optional<Clock::time_point> group_done = std::nullopt) const;
  // When FindHang can next change its answer (nullopt: no deadline pending).
  std::optional<Clock::time_point> NextDeadline(const HangPolicy& policy,
                                                std::optional<Clock::time_point> group_done = std::nullopt) const;

  bool any_active() const;  // some rank sent more than a hello: a step, a section, a snapshot
  int64_t best_step() const;  // the highest step any rank reported (-1: none)
  // The highest step any rank is known to have reached: reported, or in a snapshot it completed or
  // kept on its way out (-1: none). A script may snapshot without ever reporting a step.
  int64_t furthest_step() const;
  std::optional<int64_t> total_steps() const { return total_steps_; }
  const std::vector<RankProgress>& ranks() const { return ranks_; }

 private:
  std::optional<std::pair<Clock::time_point, Hang>> DeadlineOf(int local_rank, const HangPolicy& policy,
                                                                std::optional<Clock::time_point> group_done) const;
  // Since when `r` has been tearing down, if it is.
  std::optional<Clock::time_point> TeardownSince(const RankProgress& r,
                                                 std::optional<Clock::time_point> group_done) const;
  std::vector<RankProgress> ranks_;
  std::optional<int64_t> total_steps_;
};

}  // namespace dtrun::progress
