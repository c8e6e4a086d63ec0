#include "status/status_json.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace dtrun::status {
namespace {

using nlohmann::json;

// -1 (unknown) is null on the wire.
json Known(double v) { return v < 0 ? json(nullptr) : json(v); }
json Known(int64_t v) { return v < 0 ? json(nullptr) : json(v); }

json RankToJson(const RankStatus& r) {
  return {{"rank", Known(static_cast<int64_t>(r.global_rank))},
          {"local_rank", r.local_rank},
          {"pid", r.pid},
          {"state", r.state},
          {"step", Known(r.step)},
          {"steps_per_s", Known(r.steps_per_s)},
          {"samples_per_s", Known(r.samples_per_s)},
          {"section", r.section.empty() ? json(nullptr) : json(r.section)},
          {"section_age_s", Known(r.section_age_s)},
          {"heartbeat_age_s", Known(r.heartbeat_age_s)},
          {"cpu_percent", Known(r.cpu_percent)},
          {"rss_bytes", Known(r.rss_bytes)},
          {"gpu_util_percent", Known(r.gpu_util_percent)},
          {"gpu_mem_bytes", Known(r.gpu_mem_bytes)},
          {"snapshot_step", Known(r.snapshot_step)},
          {"snapshot_bytes", Known(r.snapshot_bytes)},
          {"buddy_step", Known(r.buddy_step)},
          {"kept_step", Known(r.kept_step)},
          {"sync_wait_s", Known(r.sync_wait_s)}};
}

json StragglerToJson(const std::optional<StragglerStatus>& s) {
  if (!s) return nullptr;
  return {{"rank", Known(static_cast<int64_t>(s->global_rank))}, {"host", s->host}, {"last_in", s->last_in}, {"window", s->window},
          {"cost_share", s->cost_share}, {"named_at_step", Known(s->named_at_step)}, {"kind", StragglerKindName(s->kind)}};
}

json NodeToJson(const NodeStatus& n) {
  json ranks = json::array();
  for (const RankStatus& r : n.ranks) ranks.push_back(RankToJson(r));
  return {{"node_id", n.node_id},
          {"host", n.host},
          {"nproc", n.nproc},
          {"round", Known(n.round)},
          {"restarts", n.restarts},
          {"time_unix_ms", n.time_unix_ms},
          {"total_steps", n.total_steps ? json(*n.total_steps) : json(nullptr)},
          {"buddy", n.buddy.empty() ? json(nullptr) : json(n.buddy)},
          {"failure_domain", n.failure_domain.empty() ? json(nullptr) : json(n.failure_domain)},
          {"ranks", ranks}};
}

// Reads one field of an object: absent or null keeps the default; a value of another type is an
// error naming the field.
template <typename T>
absl::Status Read(const json& obj, const char* key, T& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  const bool fits = std::is_same_v<T, std::string> ? it->is_string()
                    : std::is_floating_point_v<T>  ? it->is_number()
                                                   : it->is_number_integer();
  if (!fits) return absl::InvalidArgumentError(absl::StrCat("status JSON: field '", key, "' has the wrong type"));
  out = it->template get<T>();
  return absl::OkStatus();
}

#define DTRUN_READ(obj, key, field) \
  if (absl::Status st = Read(obj, key, field); !st.ok()) return st

absl::StatusOr<RankStatus> RankFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("status JSON: a rank is not an object");
  RankStatus r;
  DTRUN_READ(j, "rank", r.global_rank);
  DTRUN_READ(j, "local_rank", r.local_rank);
  DTRUN_READ(j, "pid", r.pid);
  DTRUN_READ(j, "state", r.state);
  DTRUN_READ(j, "step", r.step);
  DTRUN_READ(j, "steps_per_s", r.steps_per_s);
  DTRUN_READ(j, "samples_per_s", r.samples_per_s);
  DTRUN_READ(j, "section", r.section);
  DTRUN_READ(j, "section_age_s", r.section_age_s);
  DTRUN_READ(j, "heartbeat_age_s", r.heartbeat_age_s);
  DTRUN_READ(j, "cpu_percent", r.cpu_percent);
  DTRUN_READ(j, "rss_bytes", r.rss_bytes);
  DTRUN_READ(j, "gpu_util_percent", r.gpu_util_percent);
  DTRUN_READ(j, "gpu_mem_bytes", r.gpu_mem_bytes);
  DTRUN_READ(j, "snapshot_step", r.snapshot_step);
  DTRUN_READ(j, "snapshot_bytes", r.snapshot_bytes);
  DTRUN_READ(j, "buddy_step", r.buddy_step);
  DTRUN_READ(j, "kept_step", r.kept_step);
  DTRUN_READ(j, "sync_wait_s", r.sync_wait_s);
  return r;
}

absl::Status StragglerFromJson(const json& j, std::optional<StragglerStatus>& out) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object()) return absl::InvalidArgumentError("status JSON: 'straggler' is not an object");
  StragglerStatus s;
  DTRUN_READ(j, "rank", s.global_rank);
  DTRUN_READ(j, "host", s.host);
  DTRUN_READ(j, "last_in", s.last_in);
  DTRUN_READ(j, "window", s.window);
  DTRUN_READ(j, "cost_share", s.cost_share);
  DTRUN_READ(j, "named_at_step", s.named_at_step);
  std::string kind = s.global_rank == -1 ? "node" : "rank";  // a file from before kinds
  DTRUN_READ(j, "kind", kind);
  DT_ASSIGN_OR_RETURN(s.kind, StragglerKindFromName(kind));
  DT_RETURN_IF_ERROR(CheckStraggler(s));
  out = s;
  return absl::OkStatus();
}

absl::StatusOr<NodeStatus> NodeFromJson(const json& j, size_t max_ranks) {
  if (!j.is_object()) return absl::InvalidArgumentError("status JSON: a node is not an object");
  NodeStatus n;
  DTRUN_READ(j, "node_id", n.node_id);
  DTRUN_READ(j, "host", n.host);
  DTRUN_READ(j, "nproc", n.nproc);
  DTRUN_READ(j, "round", n.round);
  DTRUN_READ(j, "restarts", n.restarts);
  DTRUN_READ(j, "time_unix_ms", n.time_unix_ms);
  DTRUN_READ(j, "buddy", n.buddy);
  DTRUN_READ(j, "failure_domain", n.failure_domain);
  int64_t total = -1;
  DTRUN_READ(j, "total_steps", total);
  if (total >= 0) n.total_steps = total;
  auto ranks = j.find("ranks");
  if (ranks != j.end() && !ranks->is_array()) return absl::InvalidArgumentError("status JSON: 'ranks' is not a list");
  if (ranks != j.end()) {
    if (ranks->size() > max_ranks) return absl::InvalidArgumentError("status JSON: too many ranks for one node");
    for (const json& r : *ranks) {
      DT_ASSIGN_OR_RETURN(RankStatus rank, RankFromJson(r));
      n.ranks.push_back(std::move(rank));
    }
  }
  DT_RETURN_IF_ERROR(CheckNodeStatus(n, max_ranks));
  return n;
}

}  // namespace

json ToJson(const JobStatus& job) {
  json nodes = json::array();
  for (const NodeStatus& n : job.nodes) nodes.push_back(NodeToJson(n));
  return {{"schema", kStatusSchema}, {"run_id", job.run_id},
          {"phase", job.phase},      {"round", Known(job.round)},
          {"restarts_used", job.restarts_used}, {"nodes", nodes}, {"straggler", StragglerToJson(job.straggler)}};
}

absl::StatusOr<JobStatus> JobStatusFromJson(const json& j, size_t max_ranks_per_node) {
  auto schema = j.is_object() ? j.find("schema") : j.end();
  if (!j.is_object() || schema == j.end() || !schema->is_string() || *schema != kStatusSchema) {
    return absl::InvalidArgumentError(absl::StrCat("status JSON: not a ", kStatusSchema, " document"));
  }
  JobStatus job;
  DTRUN_READ(j, "run_id", job.run_id);
  DTRUN_READ(j, "phase", job.phase);
  DTRUN_READ(j, "round", job.round);
  DTRUN_READ(j, "restarts_used", job.restarts_used);
  if (auto s = j.find("straggler"); s != j.end()) {
    DT_RETURN_IF_ERROR(StragglerFromJson(*s, job.straggler));
  }
  auto nodes = j.find("nodes");
  if (nodes == j.end() || !nodes->is_array()) return absl::InvalidArgumentError("status JSON: 'nodes' is not a list");
  for (const json& n : *nodes) {
    DT_ASSIGN_OR_RETURN(NodeStatus node, NodeFromJson(n, max_ranks_per_node));
    job.nodes.push_back(std::move(node));
  }
  return job;
}

#undef DTRUN_READ

}  // namespace dtrun::status
