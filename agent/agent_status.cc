// The agent's rows for the live view (docs/DESIGN.md, "dtrun status"): one per worker from the
// progress board, the snapshot regions and /proc (and NVML); StatusPublisher asks for them once a
// status interval and hands them to every reader. Same class and loop as agent.cc.
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/agent.h"
#include "base/atomic_file.h"
#include "base/host_name.h"
#include "base/unix_time.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "status/prometheus.h"
#include "status/status_json.h"
#include "status/status_table.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

}  // namespace

std::string Agent::WorkerState(const WorkerGroup::Worker& w) const {
  if (hangs_->hung_rank() == w.local_rank) return "hung";
  if (std::optional<int> ws = w.process.wait_status()) {
    return WIFEXITED(*ws) && WEXITSTATUS(*ws) == 0 ? "succeeded" : "failed";
  }
  return stopping_ ? "stopping" : "running";
}

namespace {

// The waits of `p` after step `sent` (all of them when its count went back: a new attempt), and
// moves `sent` on.
std::vector<status::StepWait> TakeNewWaits(const progress::RankProgress& p, int64_t& sent) {
  std::vector<status::StepWait> out;
  if (p.waits.empty()) return out;
  if (p.waits.back().step < sent) sent = -1;
  for (const progress::SyncWait& w : p.waits) {
    if (w.step > sent) out.push_back({w.step, w.wait_s, w.step_s});
  }
  sent = p.waits.back().step;
  return out;
}

// The mean wait over the last (at most) 20 steps; -1 with none.
double RecentMeanWait(const progress::RankProgress& p) {
  constexpr size_t kRecent = 20;
  if (p.waits.empty()) return -1;
  const size_t n = std::min(kRecent, p.waits.size());
  double sum = 0;
  for (size_t i = p.waits.size() - n; i < p.waits.size(); ++i) sum += p.waits[i].wait_s;
  return sum / static_cast<double>(n);
}

}  // namespace

StatusPublisher::Snapshot Agent::DescribeNode(Clock::time_point now) {
  StatusPublisher::Snapshot snapshot;
  snapshot.phase = view_ ? absl::AsciiStrToLower(rdzv::PhaseName(view_->phase)) : "forming";
  status::NodeStatus& node = snapshot.node;
  node.host = LocalHostName();
  node.nproc = options_.nproc_per_node;
  node.round = group_round_;
  node.restarts = static_cast<int>(std::max<int64_t>(0, counters_.rounds - 1));
  node.time_unix_ms = UnixMillisNow();
  if (!group_) return snapshot;
  const progress::ProgressBoard* board = this->board();
  if (board) node.total_steps = board->total_steps();
  const Replicator::BuddyView buddy = snapshots_->buddy();
  const std::vector<int64_t> kept = snapshots_->KeptSteps();
  node.buddy = buddy.endpoint;
  std::vector<pid_t> pids;
  for (const WorkerGroup::Worker& w : group_->workers()) {
    if (w.process.running()) pids.push_back(w.process.pid());
  }
  std::map<pid_t, status::ProcessResources> used = sampler_.Sample(pids, now);
  if (waits_round_ != group_round_ || waits_sent_.size() != group_->workers().size()) {
    waits_round_ = group_round_;
    waits_sent_.assign(group_->workers().size(), -1);
  }
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    status::RankStatus r;
    r.global_rank = w.global_rank;
    r.local_rank = w.local_rank;
    r.pid = w.process.pid();
    r.state = WorkerState(w);
    if (board) {
      const progress::RankProgress& p = board->ranks()[w.local_rank];
      r.step = p.step;
      if (p.active) {
        r.steps_per_s = p.steps_per_s;
        r.samples_per_s = p.samples >= 0 ? p.samples_per_s : -1;
      }
      if (p.reported) r.heartbeat_age_s = SecondsBetween(p.last_report, now);
      r.sync_wait_s = RecentMeanWait(p);
      if (static_cast<size_t>(w.local_rank) < waits_sent_.size()) r.waits = TakeNewWaits(p, waits_sent_[w.local_rank]);
      if (!p.sections.empty()) {
        r.section = p.sections.back().name;
        r.section_age_s = SecondsBetween(p.sections.back().since, now);
      }
    }
    // From the region itself, not the reports: a snapshot outlives the worker that wrote it.
    if (std::optional<snapshot::SlotHeader> s = snapshots_->store().Newest(w.local_rank)) {
      r.snapshot_step = s->step;
      r.snapshot_bytes = static_cast<int64_t>(s->payload_bytes);
    }
    if (w.local_rank < static_cast<int>(buddy.kept_steps.size())) r.buddy_step = buddy.kept_steps[w.local_rank];
    if (w.local_rank < static_cast<int>(kept.size())) r.kept_step = kept[w.local_rank];
    if (board && w.local_rank < static_cast<int>(board->ranks().size())) r.warm = board->ranks()[w.local_rank].warm;
    if (auto it = used.find(w.process.pid()); it != used.end()) {
      r.cpu_percent = it->second.cpu_percent;
      r.rss_bytes = it->second.rss_bytes;
      r.gpu_util_percent = it->second.gpu.util_percent;
      r.gpu_mem_bytes = it->second.gpu.mem_bytes;
    }
    node.ranks.push_back(std::move(r));
  }
  return snapshot;
}

}  // namespace dtrun
