#include "launcher/remote_job.h"
#include "base/status_macros.h"

namespace dtrun {

absl::StatusOr<RemoteJob> ConnectRemote(const std::string& endpoint, const std::string& run_id,
                                        const CredentialFlags& flags) {
  absl::StatusOr<Credentials> creds = LoadCredentials(flags);
  DT_ASSIGN_OR_RETURN(const rdzv::GrpcModuleApi* grpc, creds.ok() ? rdzv::LoadGrpcModule() : creds.status());
  RemoteJob r;
  r.grpc = grpc;
  r.options.endpoint = endpoint;
  r.options.run_id = run_id;
  r.options.token = creds->token;
  r.options.tls = std::move(creds->tls);
  return r;
}

}  // namespace dtrun
