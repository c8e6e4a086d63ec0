#include "rendezvous/grpc_log.h"

#include <grpc/support/log.h>

#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/checked_mutex.h"
#include "spdlog/spdlog.h"

namespace dtrun::rdzv {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHandshakeReportEvery = std::chrono::seconds(30);

struct HandshakeReports {
  CheckedMutex mu;
  Clock::time_point last ABSL_GUARDED_BY(mu);
  bool any ABSL_GUARDED_BY(mu) = false;
  int suppressed ABSL_GUARDED_BY(mu) = 0;
};

void ReportHandshakeFailure(const std::string& reason) {
  static HandshakeReports reports;
  CheckedMutexLock lock(&reports.mu);
  const Clock::time_point now = Clock::now();
  if (reports.any && now - reports.last < kHandshakeReportEvery) {
    ++reports.suppressed;
    return;
  }
  spdlog::warn("TLS handshake failed ({}){}; a peer without the --rdzv-tls-* flags (plaintext), or a certificate "
               "not signed by the CA the other side was given, or one that does not name the host it is reached at "
               "(subjectAltName)",
               reason, reports.suppressed ? " (and " + std::to_string(reports.suppressed) + " more since the last report)" : "");
  reports.any = true;
  reports.last = now;
  reports.suppressed = 0;
}

// `key:"value"` inside one of gRPC's error descriptions, or "".
std::string Field(const std::string& message, const std::string& key) {
  size_t at = message.find(key + ":\"");
  if (at == std::string::npos) return "";
  at += key.size() + 2;
  return message.substr(at, message.find('"', at) - at);
}

void OnGrpcLog(gpr_log_func_args* args) {
  const char* text = args->message ? args->message : "";
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) {
    // Only the server's handshake failures (a node that did not trust us closed the connection);
    // gRPC says nothing else at this level while serving.
    if (std::strstr(text, "Security handshake failed") == nullptr) return;
    std::string message = text;
    std::string peer = Field(message, "target_address");
    if (message.find("Socket closed") != std::string::npos) {
      return ReportHandshakeFailure(absl::StrCat("the peer", peer.empty() ? "" : " " + peer,
                                                 " closed the connection during the handshake"));
    }
    return ReportHandshakeFailure(message.substr(0, 200));
  }
  std::string message = text;
  if (message.find("Handshake failed") != std::string::npos) {
    // "Handshake failed with fatal error SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number."
    size_t at = message.find("error:");
    return ReportHandshakeFailure(at == std::string::npos ? message : message.substr(at));
  }
  // The server's SNI lookup missing: harmless (it answers with its one certificate), and usual
  // between buddies, whose certificates need not name the addresses they are reached at.
  const bool sni_miss = message.find("No match found for server name") != std::string::npos;
  if (args->severity == GPR_LOG_SEVERITY_ERROR && !sni_miss) {
    spdlog::warn("grpc: {}", message);
  } else {
    spdlog::debug("grpc: {}", message);
  }
}

}  // namespace

void RouteGrpcLogs() {
  static std::once_flag once;
  std::call_once(once, [] { gpr_set_log_function(&OnGrpcLog); });
}

void ReportServerHandshakes() {
  RouteGrpcLogs();
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
}

}  // namespace dtrun::rdzv
