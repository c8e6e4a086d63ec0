// The agent's live view of its workers (docs/DESIGN.md, "dtrun status"): once a status interval it
// builds one row per worker from the progress board and /proc (and NVML), and hands it to every
// reader — the snapshot file that `dtrun status` reads, the rendezvous service (multi-node), the
// metrics endpoint and the progress line on a terminal. Same class and loop as agent.cc.
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

void Agent::StartStatusOutputs() {
  if (options_.metrics_port) {
    absl::StatusOr<std::unique_ptr<status::MetricsServer>> server =
        status::MetricsServer::Start(options_.metrics_host, *options_.metrics_port);
    if (server.ok()) {
      metrics_ = std::move(*server);
      spdlog::info("serving metrics on http://{}:{}/metrics", options_.metrics_host.empty() ? "0.0.0.0" : options_.metrics_host,
                   metrics_->port());
      events_.Record("metrics_endpoint", -1, {{"port", metrics_->port()}});
    } else {
      spdlog::warn("{}; the job runs without a metrics endpoint", std::string(server.status().message()));
    }
  }
  next_status_at_ = options_.now();
}

std::string Agent::WorkerState(const WorkerGroup::Worker& w) const {
  if (pending_hang_ && pending_hang_->hang.local_rank == w.local_rank) return "hung";
  if (std::optional<int> ws = w.process.wait_status()) {
    return WIFEXITED(*ws) && WEXITSTATUS(*ws) == 0 ? "succeeded" : "failed";
  }
  return stopping_ ? "stopping" : "running";
}

status::NodeStatus Agent::BuildNodeStatus(Clock::time_point now) {
  status::NodeStatus node;
  node.host = LocalHostName();
  node.nproc = options_.nproc_per_node;
  node.round = group_round_;
  node.restarts = static_cast<int>(std::max<int64_t>(0, counters_.rounds - 1));
  node.time_unix_ms = UnixMillisNow();
  if (!group_) return node;
  if (board_) node.total_steps = board_->total_steps();
  const Replicator::BuddyView buddy = replicator_ ? replicator_->View() : Replicator::BuddyView{};
  node.buddy = buddy.endpoint;
  std::vector<pid_t> pids;
  for (const WorkerGroup::Worker& w : group_->workers()) {
    if (w.process.running()) pids.push_back(w.process.pid());
  }
  std::map<pid_t, status::ProcessResources> used = sampler_.Sample(pids, now);
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    status::RankStatus r;
    r.global_rank = w.global_rank;
    r.local_rank = w.local_rank;
    r.pid = w.process.pid();
    r.state = WorkerState(w);
    if (board_) {
      const progress::RankProgress& p = board_->ranks()[w.local_rank];
      r.step = p.step;
      if (p.active) {
        r.steps_per_s = p.steps_per_s;
        r.samples_per_s = p.samples >= 0 ? p.samples_per_s : -1;
      }
      if (p.reported) r.heartbeat_age_s = SecondsBetween(p.last_report, now);
      if (!p.sections.empty()) {
        r.section = p.sections.back().name;
        r.section_age_s = SecondsBetween(p.sections.back().since, now);
      }
    }
    // From the region itself, not the reports: a snapshot outlives the worker that wrote it.
    if (std::optional<snapshot::SlotHeader> s = snapshots_.Newest(w.local_rank)) {
      r.snapshot_step = s->step;
      r.snapshot_bytes = static_cast<int64_t>(s->payload_bytes);
    }
    if (w.local_rank < static_cast<int>(buddy.kept_steps.size())) r.buddy_step = buddy.kept_steps[w.local_rank];
    if (board_ && w.local_rank < static_cast<int>(board_->ranks().size())) r.warm = board_->ranks()[w.local_rank].warm;
    if (auto it = used.find(w.process.pid()); it != used.end()) {
      r.cpu_percent = it->second.cpu_percent;
      r.rss_bytes = it->second.rss_bytes;
      r.gpu_util_percent = it->second.gpu.util_percent;
      r.gpu_mem_bytes = it->second.gpu.mem_bytes;
    }
    node.ranks.push_back(std::move(r));
  }
  return node;
}

void Agent::PublishStatus() {
  const Clock::time_point now = options_.now();
  if (now < next_status_at_) return;
  next_status_at_ = now + options_.status_interval;
  status::NodeStatus node = BuildNodeStatus(now);
  status::JobStatus job;
  job.run_id = options_.run_id;
  job.phase = view_ ? absl::AsciiStrToLower(rdzv::PhaseName(view_->phase)) : "forming";
  job.round = group_round_;
  job.restarts_used = node.restarts;
  job.nodes.push_back(node);
  nlohmann::json json = status::ToJson(job);
  if (!options_.rdzv_endpoint.empty()) json["endpoint"] = options_.rdzv_endpoint;
  const std::string text = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (!options_.progress_dir.empty()) {
    absl::Status st = WriteFileAtomically(StatusSnapshotPath(options_), text, 0600);
    if (!st.ok() && !status_write_warned_) {
      status_write_warned_ = true;
      spdlog::warn("{}; `dtrun status` will not show this job's workers", std::string(st.message()));
    }
  }
  if (metrics_) metrics_->Publish(status::RenderPrometheus(options_.run_id, node, counters_), text);
  if (options_.progress_line) stdio_.out->SetStatusLine(ProgressLine(node));
  rounds_->PublishStatus(std::move(node));
}

// "[dtrun] step 120/1000 | 4.10 steps/s | 131.2 samples/s | ETA 3m34s": what a terminal shows below
// the workers' lines while they report steps; "" (no line) before the first report.
std::string Agent::ProgressLine(const status::NodeStatus& node) const {
  const int64_t step = status::JobStep(node);
  if (step < 0 || stopping_) return "";
  std::string line = absl::StrCat("[dtrun] step ", step, node.total_steps ? absl::StrCat("/", *node.total_steps) : "");
  const double steps_per_s = status::StepsPerSecond(node);
  if (steps_per_s > 0) absl::StrAppend(&line, absl::StrFormat(" | %.2f steps/s", steps_per_s));
  const double samples_per_s = status::SamplesPerSecond(node);
  if (samples_per_s > 0) absl::StrAppend(&line, absl::StrFormat(" | %.1f samples/s", samples_per_s));
  if (node.total_steps && steps_per_s > 0 && *node.total_steps > step) {
    absl::StrAppend(&line, " | ETA ", status::HumanSeconds((*node.total_steps - step) / steps_per_s));
  }
  if (node.round > 0) absl::StrAppend(&line, " | round ", node.round);
  return line;
}

}  // namespace dtrun
