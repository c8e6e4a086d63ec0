// The agent's opt-in HTTP endpoint (--metrics-port): GET /metrics answers Prometheus' text format,
// GET /status the node's `dtrun.status/v1` JSON. Built on libmicrohttpd (Debian's libmicrohttpd12,
// a small, well-kept embedded HTTP server), opened at run time so that dtrun neither links it nor
// its TLS stack, and starts without it when no endpoint is asked for. Its own thread answers
// requests from the last published texts: a slow or hostile scraper never touches the agent's loop.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace dtrun::status {

class MetricsServer {
 public:
  // Listens on `host` ("" or "0.0.0.0": every IPv4 address; "::": IPv4 and IPv6) at `port` (0: a
  // free one). Connections are limited in number, size and idle time.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port);
  ~MetricsServer();
  int port() const { return port_; }
  // Replaces what the next requests get. Thread-safe.
  void Publish(std::string metrics_text, std::string status_json);

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace dtrun::status
