#include "rendezvous/wire.h"

namespace dtrun::rdzv {

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
  out->set_kind(in.kind);
}

NodeInfo FromWire(const v1::JoinRequest& in) {
  return NodeInfo{in.host(), in.nproc(), in.store_addr(), in.store_port(), in.node_rank()};
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
  f.kind = in.kind().substr(0, 32);
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
  }
  out->set_reason(in.reason);
  for (const FailureInfo& f : in.failures) ToWire(f, out->add_failures());
  out->set_exit_code(in.exit_code);
  if (in.stacks_round >= 0) out->set_stacks_round(in.stacks_round);
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
                              a.world_size(), a.master_addr(), a.master_port()};
  }
  v.reason = in.reason();
  for (const v1::Failure& f : in.failures()) v.failures.push_back(FromWire(f));
  v.exit_code = in.exit_code();
  v.stacks_round = in.has_stacks_round() ? in.stacks_round() : -1;
  return v;
}

}  // namespace dtrun::rdzv
