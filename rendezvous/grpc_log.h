// gRPC's own log lines go through spdlog (the console writer), and a failed TLS handshake becomes
// one line with OpenSSL's reason and what usually causes it — at most every 30 s with a count —
// instead of one raw gRPC line per reconnect attempt.
#pragma once

namespace dtrun::rdzv {

// Idempotent; call before the first channel or server is made.
void RouteGrpcLogs();
// A TLS server: also report handshakes that the peer ended (a node that does not trust this
// service's certificate), which gRPC logs only at debug level.
void ReportServerHandshakes();

}  // namespace dtrun::rdzv
