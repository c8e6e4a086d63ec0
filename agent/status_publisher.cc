#include "agent/status_publisher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/atomic_file.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "status/status_json.h"
#include "status/status_table.h"

namespace dtrun {

StatusPublisher::StatusPublisher(const AgentOptions& options, ConsoleWriter& out, EventLog& events,
                                 rdzv::RoundSource& rounds, const status::AgentCounters& counters, Describe describe)
    : options_(options), out_(out), events_(events), rounds_(rounds), counters_(counters),
      describe_(std::move(describe)), next_at_(options.now()) {}

void StatusPublisher::Start() {
  next_at_ = options_.now();
  if (!options_.metrics_port) return;
  absl::StatusOr<std::unique_ptr<status::MetricsServer>> server =
      status::MetricsServer::Start(options_.metrics_host, *options_.metrics_port);
  if (!server.ok()) {
    spdlog::warn("{}; the job runs without a metrics endpoint", std::string(server.status().message()));
    return;
  }
  metrics_ = std::move(*server);
  spdlog::info("serving metrics on http://{}:{}/metrics", options_.metrics_host.empty() ? "0.0.0.0" : options_.metrics_host,
               metrics_->port());
  events_.Record("metrics_endpoint", -1, {{"port", metrics_->port()}});
}

void StatusPublisher::Stop() {
  if (options_.progress_line) out_.SetStatusLine("");
}

void StatusPublisher::OnWake(Clock::time_point now) {
  if (now < next_at_) return;
  next_at_ = now + options_.status_interval;
  Publish(now);
}

void StatusPublisher::Publish(Clock::time_point now) {
  Snapshot s = describe_(now);
  rounds_.PublishStatus(s.node);  // first: a single node judges its stragglers from it at once
  std::optional<status::StragglerStatus> straggler = rounds_.Straggler();
  NoteStraggler(straggler, s.node.round, status::JobStep(s.node));
  status::JobStatus job;
  job.run_id = options_.run_id;
  job.phase = s.phase;
  job.round = s.node.round;
  job.restarts_used = s.node.restarts;
  job.straggler = straggler;
  for (status::RankStatus& r : s.node.ranks) r.waits.clear();  // sent; no reader below needs them
  job.nodes.push_back(s.node);
  nlohmann::json json = status::ToJson(job);
  if (!options_.rdzv_endpoint.empty()) json["endpoint"] = options_.rdzv_endpoint;
  const std::string text = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (!options_.progress_dir.empty()) {
    absl::Status st = WriteFileAtomically(StatusSnapshotPath(options_), text, 0600);
    if (!st.ok() && !write_warned_) {
      write_warned_ = true;
      spdlog::warn("{}; `dtrun status` will not show this job's workers", std::string(st.message()));
    }
  }
  if (metrics_) metrics_->Publish(status::RenderPrometheus(options_.run_id, s.node, counters_, straggler), text);
  if (options_.progress_line) out_.SetStatusLine(ProgressLine(s.node));
}

void StatusPublisher::NoteStraggler(const std::optional<status::StragglerStatus>& now_named, int64_t round,
                                    int64_t step) {
  // Who is named: a rank, a whole node (rank -1 and its label) or a link, by kind; "" for nobody.
  const std::string who = now_named ? absl::StrCat(status::StragglerKindName(now_named->kind), ":",
                                                  now_named->global_rank, "@", now_named->host)
                                    : "";
  if (who == named_) {
    if (now_named && worst_ && worst_->global_rank == now_named->global_rank && worst_->host == now_named->host &&
        worst_->kind == now_named->kind) {
      worst_->cost_share = std::max(worst_->cost_share, now_named->cost_share);
    }
    return;
  }
  named_ = who;
  // A spare, or a node whose ranks have not stepped yet, has no step of its own to say.
  const std::string at = step >= 0 ? absl::StrCat(" (step ", step, ")") : "";
  if (!now_named) {
    spdlog::info("no rank is holding the job back any more{}", at);
    events_.Record("straggler_cleared", round, {{"step", step}});
    return;
  }
  const std::string line = status::DescribeStraggler(*now_named);
  spdlog::warn("straggler: {}{}", line, at);
  events_.Record("straggler", round,
                 {{"rank", now_named->global_rank}, {"node", now_named->host},
                  {"kind", status::StragglerKindName(now_named->kind)}, {"step", step},
                  {"last_in", now_named->last_in}, {"window", now_named->window},
                  {"cost_share", now_named->cost_share}, {"named_at_step", now_named->named_at_step}});
  if (!worst_ || now_named->cost_share > worst_->cost_share) worst_ = now_named;
  ++named_count_;
}

std::string StatusPublisher::Summary() const {
  if (!worst_) return "";
  return absl::StrCat("straggler: ", named_count_ == 1 ? "" : absl::StrCat("named ", named_count_, " times; the worst: "),
                      status::DescribeStraggler(*worst_));
}

std::string StatusPublisher::ProgressLine(const status::NodeStatus& node) {
  const int64_t step = status::JobStep(node);
  const bool stopping = std::any_of(node.ranks.begin(), node.ranks.end(),
                                    [](const status::RankStatus& r) { return r.state == "stopping"; });
  if (step < 0 || stopping) return "";
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
