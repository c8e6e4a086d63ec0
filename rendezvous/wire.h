// Conversions between the rendezvous core's types and the v1 wire messages, and the one mapping
// from absl::Status to grpc::Status (canonical codes are numbered alike).
#pragma once

#include <vector>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/rendezvous_state.h"

namespace dtrun::rdzv {

inline constexpr uint32_t kProtocolVersion = 1;

// The job's credentials as every service of the job checks them (the token in constant time).
absl::Status CheckJobCredentials(const v1::Credentials& auth, const std::string& run_id, const std::string& token);

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

void ToWire(const FailureInfo& in, v1::Failure* out);
FailureInfo FromWire(const v1::Failure& in);
void ToWire(const NodeView& in, v1::WatchResponse* out);
// What a joining node says about itself, as the service takes it.
NodeInfo FromWire(const v1::JoinRequest& in);
std::vector<FailureInfo> FailuresFromWire(const v1::OutcomeRequest& in);
NodeView FromWire(const v1::WatchResponse& in);
// A node's status summary. FromWire copies at most status::kMaxRanksPerNode + 1 rows (one
// more than the state keeps, so that too many is still refused there).
void ToWire(const status::NodeStatus& in, v1::NodeProgress* out);
status::NodeStatus FromWire(const v1::NodeProgress& in);
// The named straggler; FromWire drops one whose numbers are out of range (nullopt, as if none).
void ToWire(const status::StragglerStatus& in, v1::Straggler* out);
std::optional<status::StragglerStatus> StragglerFromWire(bool present, const v1::Straggler& in);
void ToWire(const JobSummary& in, v1::StatusResponse* out);
JobSummary FromWire(const v1::StatusResponse& in);

}  // namespace dtrun::rdzv
