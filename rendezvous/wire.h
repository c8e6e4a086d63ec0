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

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

void ToWire(const FailureInfo& in, v1::Failure* out);
FailureInfo FromWire(const v1::Failure& in);
void ToWire(const NodeView& in, v1::WatchResponse* out);
// What a joining node says about itself, as the service takes it.
NodeInfo FromWire(const v1::JoinRequest& in);
std::vector<FailureInfo> FailuresFromWire(const v1::OutcomeRequest& in);
NodeView FromWire(const v1::WatchResponse& in);

}  // namespace dtrun::rdzv
