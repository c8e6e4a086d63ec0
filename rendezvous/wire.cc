#include "rendezvous/wire.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dtrun::rdzv {

namespace {
// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}
}  // namespace

absl::Status CheckJobCredentials(const v1::Credentials& auth, const std::string& run_id, const std::string& token) {
  if (auth.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rendezvous protocol version ", auth.protocol_version(), " is not supported (this service speaks ",
        kProtocolVersion, "); run the same dtrun version on every node"));
  }
  if (auth.run_id() != run_id) {
    return absl::PermissionDeniedError(absl::StrCat("run id '", auth.run_id(), "' does not match this job's '", run_id,
                                                    "'; use the same --rdzv-id on every node"));
  }
  if (!SameSecret(auth.token(), token)) {
    return absl::UnauthenticatedError(
        "wrong rendezvous token; give every node the job's token (--rdzv-token, DTRUN_RDZV_TOKEN or --rdzv-token-file)");
  }
  return absl::OkStatus();
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void ToWire(const FailureInfo& in, v1::Failure* out) {
  out->set_host(in.host);
  out->set_global_rank(in.global_rank);
  out->set_local_rank(in.local_rank);
  out->set_exit_code(in.exit_code);
  out->set_signal(in.signal);
  out->set_pid(in.pid);
  out->set_time_unix_ms(in.time_unix_ms);
  out->set_error_file(in.error_file);
  out->set_message(in.message);
  out->set_traceback(in.traceback);
  out->set_error_timestamp(in.error_timestamp);
  out->set_kind(FailureKindName(in.kind));
}

NodeInfo FromWire(const v1::JoinRequest& in) {
  NodeInfo node{in.host(),      in.nproc(),        in.store_addr(),  in.store_port(),
                in.node_rank(), in.replica_addr(), in.replica_port()};
  node.predecessor_dead = in.predecessor_dead();
  node.rounds_seen = in.rounds_seen();
  node.restarts_used = in.restarts_used();
  node.failure_domain = in.failure_domain();
  // Only a place a round can have: anything else is no claim.
  if (in.has_last_group_rank() && in.last_group_rank() >= 0) node.last_group_rank = in.last_group_rank();
  return node;
}

std::vector<FailureInfo> FailuresFromWire(const v1::OutcomeRequest& in) {
  std::vector<FailureInfo> failures;
  failures.reserve(static_cast<size_t>(in.failures_size()));
  for (const v1::Failure& f : in.failures()) failures.push_back(FromWire(f));
  return failures;
}

FailureInfo FromWire(const v1::Failure& in) {
  FailureInfo f;
  f.host = in.host();
  f.global_rank = in.global_rank();
  f.local_rank = in.local_rank();
  f.exit_code = in.exit_code();
  f.signal = in.signal();
  f.pid = in.pid();
  f.time_unix_ms = in.time_unix_ms();
  f.error_file = in.error_file();
  f.message = in.message();
  f.traceback = in.traceback();
  f.error_timestamp = in.error_timestamp();
  f.kind = FailureKindFromName(in.kind());
  return f;
}

void ToWire(const NodeView& in, v1::WatchResponse* out) {
  out->set_version(in.version);
  out->set_round(in.round);
  out->set_phase(static_cast<v1::Phase>(in.phase));
  out->set_spare(in.role == NodeRole::kSpare);
  if (in.assignment) {
    v1::Assignment* a = out->mutable_assignment();
    a->set_round(in.assignment->round);
    a->set_group_rank(in.assignment->group_rank);
    a->set_group_world_size(in.assignment->group_world_size);
    a->set_rank_offset(in.assignment->rank_offset);
    a->set_world_size(in.assignment->world_size);
    a->set_master_addr(in.assignment->master_addr);
    a->set_master_port(in.assignment->master_port);
    a->set_buddy_addr(in.assignment->buddy_addr);
    a->set_buddy_port(in.assignment->buddy_port);
    for (const ReplicaEndpoint& at : in.assignment->copies_at) {
      v1::ReplicaEndpoint* e = a->add_copies_at();
      e->set_addr(at.addr);
      e->set_port(at.port);
    }
    a->set_buddy_failure_domain(in.assignment->buddy_failure_domain);
  }
  out->set_reason(in.reason);
  out->set_awaited(in.awaited);
  for (const FailureInfo& f : in.failures) ToWire(f, out->add_failures());
  out->set_exit_code(in.exit_code);
  if (in.stacks_round >= 0) out->set_stacks_round(in.stacks_round);
  out->set_program_parks(in.program_parks);
  out->set_restarts_used(in.restarts_used);
}

NodeView FromWire(const v1::WatchResponse& in) {
  NodeView v;
  v.version = in.version();
  v.round = in.round();
  v.phase = static_cast<JobPhase>(in.phase());
  v.role = in.spare() ? NodeRole::kSpare : in.has_assignment() ? NodeRole::kMember : NodeRole::kWaiting;
  if (in.has_assignment()) {
    const v1::Assignment& a = in.assignment();
    v.assignment = Assignment{a.round(), a.group_rank(), a.group_world_size(), a.rank_offset(),
                              a.world_size(), a.master_addr(), a.master_port(),
                              a.buddy_addr(), a.buddy_port()};
    // From the service: as many as it sends (kCopyHolders from this build), each tried in turn.
    for (const v1::ReplicaEndpoint& at : a.copies_at()) {
      if (v.assignment->copies_at.size() == kCopyHolders) break;
      v.assignment->copies_at.push_back({at.addr(), at.port()});
    }
    v.assignment->buddy_failure_domain = a.buddy_failure_domain().substr(0, kMaxFailureDomainBytes);
  }
  v.reason = in.reason();
  v.awaited = in.awaited();
  for (const v1::Failure& f : in.failures()) v.failures.push_back(FromWire(f));
  v.exit_code = in.exit_code();
  v.stacks_round = in.has_stacks_round() ? in.stacks_round() : -1;
  v.program_parks = in.program_parks();
  v.restarts_used = in.restarts_used();
  return v;
}

void ToWire(const status::NodeStatus& in, v1::NodeProgress* out) {
  out->set_round(in.round);
  out->set_restarts(in.restarts);
  out->set_time_unix_ms(in.time_unix_ms);
  if (in.total_steps) out->set_total_steps(*in.total_steps);
  out->set_buddy(in.buddy);
  for (const status::RankStatus& r : in.ranks) {
    v1::RankProgress* w = out->add_ranks();
    w->set_global_rank(r.global_rank);
    w->set_local_rank(r.local_rank);
    w->set_pid(r.pid);
    w->set_state(r.state);
    w->set_step(r.step);
    w->set_steps_per_s(r.steps_per_s);
    w->set_samples_per_s(r.samples_per_s);
    w->set_section(r.section);
    w->set_section_age_s(r.section_age_s);
    w->set_heartbeat_age_s(r.heartbeat_age_s);
    w->set_cpu_percent(r.cpu_percent);
    w->set_rss_bytes(r.rss_bytes);
    w->set_gpu_util_percent(r.gpu_util_percent);
    w->set_gpu_mem_bytes(r.gpu_mem_bytes);
    w->set_snapshot_step(r.snapshot_step);
    w->set_snapshot_bytes(r.snapshot_bytes);
    if (r.buddy_step >= 0) w->set_buddy_step(r.buddy_step);
    if (r.kept_step >= 0) w->set_kept_step(r.kept_step);
    w->set_warm(r.warm);
    if (r.sync_wait_s >= 0) w->set_sync_wait_s(r.sync_wait_s);
    for (const status::StepWait& sw : r.waits) {
      v1::StepWait* o = w->add_waits();
      o->set_step(sw.step);
      o->set_wait_s(sw.wait_s);
      o->set_step_s(sw.step_s);
    }
  }
}

status::NodeStatus FromWire(const v1::NodeProgress& in) {
  status::NodeStatus out;
  out.round = in.round();
  out.restarts = in.restarts();
  out.time_unix_ms = in.time_unix_ms();
  if (in.has_total_steps()) out.total_steps = in.total_steps();
  out.buddy = in.buddy();
  const int rows = std::min<int>(in.ranks_size(), static_cast<int>(status::kMaxRanksPerNode) + 1);
  out.ranks.reserve(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) {
    const v1::RankProgress& w = in.ranks(i);
    status::RankStatus r;
    r.global_rank = w.global_rank();
    r.local_rank = w.local_rank();
    r.pid = w.pid();
    r.state = w.state();
    r.step = w.step();
    r.steps_per_s = w.steps_per_s();
    r.samples_per_s = w.samples_per_s();
    r.section = w.section();
    r.section_age_s = w.section_age_s();
    r.heartbeat_age_s = w.heartbeat_age_s();
    r.cpu_percent = w.cpu_percent();
    r.rss_bytes = w.rss_bytes();
    r.gpu_util_percent = w.gpu_util_percent();
    r.gpu_mem_bytes = w.gpu_mem_bytes();
    // proto3 has no "absent": 0 bytes is no snapshot.
    r.snapshot_step = w.snapshot_bytes() > 0 ? w.snapshot_step() : -1;
    r.snapshot_bytes = w.snapshot_bytes() > 0 ? w.snapshot_bytes() : -1;
    r.buddy_step = w.has_buddy_step() ? w.buddy_step() : -1;
    r.kept_step = w.has_kept_step() ? w.kept_step() : -1;
    r.warm = w.warm();
    r.sync_wait_s = w.has_sync_wait_s() ? w.sync_wait_s() : -1;
    const int waits = std::min<int>(w.waits_size(), static_cast<int>(status::kMaxWaitsPerRank) + 1);
    r.waits.reserve(static_cast<size_t>(waits));
    for (int k = 0; k < waits; ++k) r.waits.push_back({w.waits(k).step(), w.waits(k).wait_s(), w.waits(k).step_s()});
    out.ranks.push_back(std::move(r));
  }
  return out;
}

void ToWire(const status::StragglerStatus& in, v1::Straggler* out) {
  out->set_rank(in.global_rank);
  out->set_host(in.host);
  out->set_last_in(in.last_in);
  out->set_window(in.window);
  out->set_cost_share(in.cost_share);
  if (in.named_at_step >= 0) out->set_named_at_step(in.named_at_step);
  out->set_kind(in.kind == status::StragglerKind::kLink   ? v1::Straggler::LINK
                : in.kind == status::StragglerKind::kNode ? v1::Straggler::NODE
                                                          : v1::Straggler::RANK);
}

std::optional<status::StragglerStatus> StragglerFromWire(bool present, const v1::Straggler& in) {
  if (!present) return std::nullopt;
  const status::StragglerKind kind = in.kind() == v1::Straggler::LINK                       ? status::StragglerKind::kLink
                                     : in.kind() == v1::Straggler::NODE || in.rank() == -1 ? status::StragglerKind::kNode
                                                                                           : status::StragglerKind::kRank;
  status::StragglerStatus s{in.rank(), in.host().substr(0, status::kMaxStatusString), in.last_in(), in.window(),
                            in.cost_share(), in.has_named_at_step() ? in.named_at_step() : -1, kind};
  return status::CheckStraggler(s).ok() ? std::optional(s) : std::nullopt;
}

void ToWire(const JobSummary& in, v1::StatusResponse* out) {
  out->set_round(in.round);
  out->set_phase(static_cast<v1::Phase>(in.phase));
  out->set_restarts_used(in.restarts_used);
  for (size_t i = 0; i < in.nodes.size(); ++i) {
    v1::NodeStatus* n = out->add_nodes();
    n->set_node_id(in.nodes[i].first);
    n->set_host(in.nodes[i].second.host);
    n->set_nproc(in.nodes[i].second.nproc);
    n->set_failure_domain(in.nodes[i].second.failure_domain);
    if (i < in.progress.size() && in.progress[i].time_unix_ms > 0) ToWire(in.progress[i], n->mutable_progress());
  }
  if (in.straggler) ToWire(*in.straggler, out->mutable_straggler());
}

JobSummary FromWire(const v1::StatusResponse& in) {
  JobSummary s;
  s.phase = static_cast<JobPhase>(in.phase());
  s.round = in.round();
  s.restarts_used = in.restarts_used();
  for (const v1::NodeStatus& n : in.nodes()) {
    s.nodes.emplace_back(n.node_id(), NodeInfo{n.host(), n.nproc(), "", 0, -1, "", 0});
    status::NodeStatus p = n.has_progress() ? FromWire(n.progress()) : status::NodeStatus{};
    p.node_id = n.node_id();
    p.host = n.host();
    p.nproc = n.nproc();
    p.failure_domain = n.failure_domain().substr(0, kMaxFailureDomainBytes);
    s.progress.push_back(std::move(p));
  }
  s.straggler = StragglerFromWire(in.has_straggler(), in.straggler());
  return s;
}

}  // namespace dtrun::rdzv
