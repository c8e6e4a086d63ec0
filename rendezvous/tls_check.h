// Checks TLS material the way a handshake will use it, so a mistake is named at start instead of
// surfacing as connections that fail later: the certificate and key parse and belong together,
// and the certificate chains to the CA and is valid now. OpenSSL (which gRPC uses here too).
#pragma once

#include "absl/status/status.h"
#include "rendezvous/rendezvous_options.h"

namespace dtrun::rdzv {

// InvalidArgument naming the flag at fault and OpenSSL's reason.
absl::Status CheckTlsCredentials(const TlsCredentials& tls);

}  // namespace dtrun::rdzv
