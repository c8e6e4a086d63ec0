#include "progress/progress_board.h"

#include <algorithm>

namespace dtrun::progress {
namespace {

// Rates are measured over windows of at least this long, so one slow step does not swing them.
constexpr Millis kRateWindow{2000};

void UpdateRates(RankProgress& r, Clock::time_point now) {
  if (r.window_step < 0) {
    r.window_start = now;
    r.window_step = r.step;
    r.window_samples = r.samples;
    return;
  }
  const double seconds = std::chrono::duration<double>(now - r.window_start).count();
  if (seconds * 1000 < kRateWindow.count()) return;
  r.steps_per_s = r.step >= r.window_step ? (r.step - r.window_step) / seconds : 0;
  r.samples_per_s = r.samples >= 0 && r.samples >= r.window_samples ? (r.samples - r.window_samples) / seconds : 0;
  r.window_start = now;
  r.window_step = r.step;
  r.window_samples = r.samples;
}

}  // namespace

void ProgressBoard::Apply(int local_rank, const Report& report, Clock::time_point now) {
  RankProgress& r = ranks_.at(local_rank);
  r.reported = true;
  r.last_report = now;
  if (report.kind != Report::Kind::kHello && report.kind != Report::Kind::kTotal) r.active = true;
  switch (report.kind) {
    case Report::Kind::kHello:
      r.lang = report.lang;
      r.stack_signal = report.stack_signal;
      r.warm = report.warm;
      break;
    case Report::Kind::kBeat:
      if (report.step) r.step = *report.step;
      if (report.samples) r.samples = *report.samples;
      if (report.step) UpdateRates(r, now);
      break;
    case Report::Kind::kBegin:
      if (r.sections.size() < kMaxOpenSections) r.sections.push_back({report.name, now});
      break;
    case Report::Kind::kEnd: {
      // Closes the innermost section of that name and any left open inside it.
      auto it = std::find_if(r.sections.rbegin(), r.sections.rend(),
                             [&](const OpenSection& s) { return s.name == report.name; });
      if (it != r.sections.rend()) r.sections.erase(std::prev(it.base()), r.sections.end());
      break;
    }
    case Report::Kind::kTotal:
      total_steps_ = report.total_steps;
      break;
    case Report::Kind::kSnapshot:
      r.snapshot_step = report.step.value_or(-1);
      r.snapshot_bytes = report.bytes.value_or(0);
      r.snapshot_micros = report.micros.value_or(0);
      break;
    case Report::Kind::kRestored:
      r.restored_source = report.source;
      r.restored_step = report.step.value_or(-1);
      break;
    case Report::Kind::kKept:  // the agent stops the worker; the restore says what was used
      r.kept_step = std::max(r.kept_step, report.step.value_or(-1));
      break;
    case Report::Kind::kKeeping:   // the agent's stop waits for it; nothing to show
    case Report::Kind::kNotKept:   // the worker's stderr says why
    case Report::Kind::kDiverged:  // the agent's event log says it; nothing to keep here
      break;
    case Report::Kind::kSync:
      // Steps must rise: a repeat or a step back (a confused or hostile worker) is dropped.
      if (!r.waits.empty() && *report.step <= r.waits.back().step) break;
      r.waits.push_back({*report.step, *report.wait_micros / 1e6, *report.step_micros / 1e6});
      if (r.waits.size() > kMaxRecentWaits) r.waits.pop_front();
      break;
  }
}

std::optional<Clock::time_point> ProgressBoard::TeardownSince(const RankProgress& r,
                                                               std::optional<Clock::time_point> group_done) const {
  std::optional<Clock::time_point> since;
  // Steps may be counted from 0 or 1: the step numbered total-1 is taken as the last either way.
  if (total_steps_ && *total_steps_ > 0 && r.step + 1 >= *total_steps_) since = r.last_report;
  if (group_done) since = since ? std::min(*since, std::max(*group_done, r.last_report)) : std::max(*group_done, r.last_report);
  return since;
}

std::optional<std::pair<Clock::time_point, Hang>> ProgressBoard::DeadlineOf(
    int local_rank, const HangPolicy& policy, std::optional<Clock::time_point> group_done) const {
  const RankProgress& r = ranks_[local_rank];
  if (!r.active) return std::nullopt;
  Hang h;
  h.local_rank = local_rank;
  h.step = r.step;
  for (auto s = r.sections.rbegin(); s != r.sections.rend(); ++s) {
    auto limit = policy.section_timeouts.find(s->name);
    if (limit == policy.section_timeouts.end()) continue;
    h.section = s->name;
    h.limit = limit->second;
    h.rule = "section";
    return std::make_pair(s->since + limit->second, h);
  }
  if (!policy.heartbeat_timeout) return std::nullopt;
  h.section = r.sections.empty() ? "" : r.sections.back().name;
  if (std::optional<Clock::time_point> teardown = TeardownSince(r, group_done)) {
    if (!policy.teardown_timeout) return std::nullopt;
    h.limit = *policy.teardown_timeout;
    h.rule = "teardown";
    return std::make_pair(*teardown + *policy.teardown_timeout, h);
  }
  h.limit = *policy.heartbeat_timeout;
  h.rule = "heartbeat";
  return std::make_pair(r.last_report + *policy.heartbeat_timeout, h);
}

std::optional<Hang> ProgressBoard::FindHang(const HangPolicy& policy, Clock::time_point now,
                                            std::optional<Clock::time_point> group_done) const {
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i) {
    auto d = DeadlineOf(i, policy, group_done);
    if (!d || now < d->first) continue;
    Hang h = d->second;
    h.stuck_for = std::chrono::duration_cast<Millis>(now - (d->first - h.limit));
    return h;
  }
  return std::nullopt;
}

std::optional<Clock::time_point> ProgressBoard::NextDeadline(const HangPolicy& policy,
                                                             std::optional<Clock::time_point> group_done) const {
  std::optional<Clock::time_point> next;
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i) {
    auto d = DeadlineOf(i, policy, group_done);
    if (d && (!next || d->first < *next)) next = d->first;
  }
  return next;
}

bool ProgressBoard::any_active() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const RankProgress& r) { return r.active; });
}

int64_t ProgressBoard::best_step() const {
  int64_t best = -1;
  for (const RankProgress& r : ranks_) best = std::max(best, r.step);
  return best;
}

int64_t ProgressBoard::furthest_step() const {
  int64_t furthest = -1;
  for (const RankProgress& r : ranks_) furthest = std::max({furthest, r.step, r.snapshot_step, r.kept_step});
  return furthest;
}

}  // namespace dtrun::progress
