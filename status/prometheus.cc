#include "status/prometheus.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dtrun::status {
namespace {

// A label value as the format quotes it: backslash, double quote and newline escaped.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string common) : common_(std::move(common)) {}
  void Family(const char* name, const char* type, const char* help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(const char* name, const std::string& labels, double value) {
    absl::StrAppend(&out_, name, "{", common_, labels.empty() ? "" : ",", labels, "} ",
                    absl::StrFormat("%.10g", value), "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string common_;
  std::string out_;
};

std::string RankLabels(const RankStatus& r) {
  return absl::StrCat("rank=\"", r.global_rank, "\",local_rank=\"", r.local_rank, "\"");
}

// One gauge per rank, for the ranks where `value` is known (>= 0).
template <typename Get>
void PerRank(Writer& w, const NodeStatus& node, const char* name, const char* help, Get value) {
  w.Family(name, "gauge", help);
  for (const RankStatus& r : node.ranks) {
    const double v = value(r);
    if (v >= 0) w.Sample(name, RankLabels(r), v);
  }
}

}  // namespace

std::string RenderPrometheus(const std::string& run_id, const NodeStatus& node, const AgentCounters& counters,
                             const std::optional<StragglerStatus>& straggler) {
  Writer w(absl::StrCat("run_id=\"", Escape(run_id), "\",host=\"", Escape(node.host), "\""));
  w.Family("dtrun_restarts_total", "counter", "Job-wide restarts used so far.");
  w.Sample("dtrun_restarts_total", "", node.restarts);
  w.Family("dtrun_rounds_total", "counter", "Rounds this node started workers for.");
  w.Sample("dtrun_rounds_total", "", static_cast<double>(counters.rounds));
  w.Family("dtrun_hangs_total", "counter", "Hangs declared on this node.");
  w.Sample("dtrun_hangs_total", "", static_cast<double>(counters.hangs));
  w.Family("dtrun_worker_failures_total", "counter", "Workers of this node that failed.");
  w.Sample("dtrun_worker_failures_total", "", static_cast<double>(counters.worker_failures));
  w.Family("dtrun_worker_oom_kills_total", "counter", "Workers of this node the kernel's out-of-memory killer ended.");
  w.Sample("dtrun_worker_oom_kills_total", "", static_cast<double>(counters.oom_kills));
  w.Family("dtrun_round", "gauge", "The round this node runs (-1: none yet).");
  w.Sample("dtrun_round", "", static_cast<double>(node.round));
  std::map<std::string, int> by_state = {{"running", 0}, {"succeeded", 0}, {"failed", 0}, {"hung", 0}, {"stopping", 0}};
  for (const RankStatus& r : node.ranks) ++by_state[r.state];
  w.Family("dtrun_workers", "gauge", "This node's workers by state.");
  for (const auto& [state, n] : by_state) w.Sample("dtrun_workers", absl::StrCat("state=\"", Escape(state), "\""), n);
  if (node.total_steps) {
    w.Family("dtrun_total_steps", "gauge", "The number of steps the job announced.");
    w.Sample("dtrun_total_steps", "", static_cast<double>(*node.total_steps));
  }
  PerRank(w, node, "dtrun_step", "The last step the rank reported.", [](const RankStatus& r) { return static_cast<double>(r.step); });
  PerRank(w, node, "dtrun_steps_per_second", "Steps per second over the last window.", [](const RankStatus& r) { return r.steps_per_s; });
  PerRank(w, node, "dtrun_samples_per_second", "Samples per second over the last window.", [](const RankStatus& r) { return r.samples_per_s; });
  PerRank(w, node, "dtrun_heartbeat_age_seconds", "Seconds since the rank's last progress report.", [](const RankStatus& r) { return r.heartbeat_age_s; });
  PerRank(w, node, "dtrun_section_age_seconds", "Seconds the rank has been in its current section.", [](const RankStatus& r) { return r.section_age_s; });
  PerRank(w, node, "dtrun_worker_cpu_percent", "CPU use of the worker process (100 = one core).", [](const RankStatus& r) { return r.cpu_percent; });
  PerRank(w, node, "dtrun_worker_rss_bytes", "Resident memory of the worker process.", [](const RankStatus& r) { return static_cast<double>(r.rss_bytes); });
  PerRank(w, node, "dtrun_worker_gpu_utilization_percent", "Utilisation of the GPU the worker uses (NVML).", [](const RankStatus& r) { return r.gpu_util_percent; });
  PerRank(w, node, "dtrun_worker_gpu_memory_bytes", "GPU memory the worker holds (NVML).", [](const RankStatus& r) { return static_cast<double>(r.gpu_mem_bytes); });
  PerRank(w, node, "dtrun_snapshot_step", "The step of the rank's newest in-memory snapshot.", [](const RankStatus& r) { return static_cast<double>(r.snapshot_step); });
  PerRank(w, node, "dtrun_snapshot_bytes", "The size of the rank's newest in-memory snapshot.", [](const RankStatus& r) { return static_cast<double>(r.snapshot_bytes); });
  PerRank(w, node, "dtrun_buddy_snapshot_step", "The newest step of the rank whose snapshot its node's buddy holds a copy of.", [](const RankStatus& r) { return static_cast<double>(r.buddy_step); });
  PerRank(w, node, "dtrun_kept_snapshot_step", "The newest step of the rank whose snapshot is written to --snapshot-dir.", [](const RankStatus& r) { return static_cast<double>(r.kept_step); });
  PerRank(w, node, "dtrun_sync_wait_seconds", "The rank's mean wait inside the gradient all-reduce over its recent steps.", [](const RankStatus& r) { return r.sync_wait_s; });
  w.Family("dtrun_straggler_rank", "gauge", "The global rank judged to hold the job back (-1: none).");
  w.Sample("dtrun_straggler_rank", "", straggler ? straggler->global_rank : -1);
  w.Family("dtrun_straggler_cost_ratio", "gauge", "The wait the straggler causes every rank, as a share of the step time.");
  w.Sample("dtrun_straggler_cost_ratio", "", straggler ? straggler->cost_share : 0);
  w.Family("dtrun_straggler_kind", "gauge",
           "1 for what holds the job back: one rank, a whole node, or a slow link (the all-reduce's path).");
  for (StragglerKind k : {StragglerKind::kRank, StragglerKind::kNode, StragglerKind::kLink}) {
    w.Sample("dtrun_straggler_kind", absl::StrCat("kind=\"", StragglerKindName(k), "\""), straggler && straggler->kind == k ? 1 : 0);
  }
  return w.Take();
}

}  // namespace dtrun::status
