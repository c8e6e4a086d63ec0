// A job's rendezvous service as `dtrun kill/status --endpoint` reach it: the credentials read and
// checked as every command reads them, and the gRPC module loaded.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "launcher/credentials.h"
#include "rendezvous/grpc_module.h"

namespace dtrun {

struct RemoteJob {
  const rdzv::GrpcModuleApi* grpc = nullptr;
  rdzv::ClientOptions options;
};

// Errors name the flag or file (InvalidArgument) or the missing module.
absl::StatusOr<RemoteJob> ConnectRemote(const std::string& endpoint, const std::string& run_id,
                                        const CredentialFlags& flags);

}  // namespace dtrun
