#include "status/metrics_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <string.h>


#include "absl/strings/str_cat.h"
#include "base/checked_mutex.h"
#include "base/shared_library.h"
#include "base/status_macros.h"

namespace dtrun::status {

// The few libmicrohttpd entry points used, resolved from the library opened at run time. Outside
// the anonymous namespace: it is a member of MetricsServer::Impl (GCC warns otherwise, -Wsubobject-
// linkage, when a unity build includes this file).
struct Mhd {
  SharedLibrary lib;
  decltype(&MHD_start_daemon) start_daemon = nullptr;
  decltype(&MHD_stop_daemon) stop_daemon = nullptr;
  decltype(&MHD_get_daemon_info) get_daemon_info = nullptr;
  decltype(&MHD_create_response_from_buffer) create_response_from_buffer = nullptr;
  decltype(&MHD_add_response_header) add_response_header = nullptr;
  decltype(&MHD_queue_response) queue_response = nullptr;
  decltype(&MHD_destroy_response) destroy_response = nullptr;
};

namespace {

absl::StatusOr<Mhd> LoadMhd() {
  DT_ASSIGN_OR_RETURN(SharedLibrary lib, SharedLibrary::Open({"libmicrohttpd.so.12"}, "libmicrohttpd12"));
  Mhd m{std::move(lib)};
  m.start_daemon = m.lib.Find<decltype(m.start_daemon)>("MHD_start_daemon");
  m.stop_daemon = m.lib.Find<decltype(m.stop_daemon)>("MHD_stop_daemon");
  m.get_daemon_info = m.lib.Find<decltype(m.get_daemon_info)>("MHD_get_daemon_info");
  m.create_response_from_buffer = m.lib.Find<decltype(m.create_response_from_buffer)>("MHD_create_response_from_buffer");
  m.add_response_header = m.lib.Find<decltype(m.add_response_header)>("MHD_add_response_header");
  m.queue_response = m.lib.Find<decltype(m.queue_response)>("MHD_queue_response");
  m.destroy_response = m.lib.Find<decltype(m.destroy_response)>("MHD_destroy_response");
  if (!m.start_daemon || !m.stop_daemon || !m.get_daemon_info || !m.create_response_from_buffer ||
      !m.add_response_header || !m.queue_response || !m.destroy_response) {
    return absl::FailedPreconditionError("libmicrohttpd.so.12 lacks an entry point dtrun uses (0.9.71 or newer needed)");
  }
  return m;
}

}  // namespace

struct MetricsServer::Impl {
  explicit Impl(Mhd m) : mhd(std::move(m)) {}
  Mhd mhd;
  MHD_Daemon* daemon = nullptr;
  CheckedMutex mu;
  std::string metrics ABSL_GUARDED_BY(mu) = "# no report yet\n";
  std::string status ABSL_GUARDED_BY(mu) = "{}\n";

  MHD_Result Answer(MHD_Connection* connection, const char* url, const char* method) {
    unsigned code = MHD_HTTP_OK;
    std::string body, type = "text/plain; charset=utf-8";
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
      code = MHD_HTTP_METHOD_NOT_ALLOWED;
      body = "dtrun answers GET only\n";
    } else if (strcmp(url, "/metrics") == 0) {
      CheckedMutexLock lock(&mu);
      body = metrics;
      type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strcmp(url, "/status") == 0) {
      CheckedMutexLock lock(&mu);
      body = status;
      type = "application/json";
    } else {
      code = MHD_HTTP_NOT_FOUND;
      body = "dtrun serves /metrics (Prometheus) and /status (JSON)\n";
    }
    MHD_Response* response = mhd.create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
    if (!response) return MHD_NO;
    mhd.add_response_header(response, "Content-Type", type.c_str());
    MHD_Result r = mhd.queue_response(connection, code, response);
    mhd.destroy_response(response);
    return r;
  }

  static MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url, const char* method,
                           const char* /*version*/, const char* /*upload_data*/, size_t* upload_data_size,
                           void** /*request_state*/) {
    if (*upload_data_size != 0) {
      *upload_data_size = 0;  // a body is read and dropped; the answer comes once it is all in
      return MHD_YES;
    }
    try {
      return static_cast<Impl*>(cls)->Answer(connection, url, method);
    } catch (...) {  // std::bad_alloc: close this connection, keep serving
      return MHD_NO;
    }
  }
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}

MetricsServer::~MetricsServer() {
  if (impl_->daemon) impl_->mhd.stop_daemon(impl_->daemon);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("--metrics-port ", port, ": expected 0..65535"));
  sockaddr_in6 addr6{};
  sockaddr_in addr4{};
  sockaddr* addr = nullptr;
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD;
  if (host.find(':') != std::string::npos) {
    addr6.sin6_family = AF_INET6;
    addr6.sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, host.c_str(), &addr6.sin6_addr) != 1) addr = nullptr;
    else addr = reinterpret_cast<sockaddr*>(&addr6);
    flags |= host == "::" ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  } else {
    addr4.sin_family = AF_INET;
    addr4.sin_port = htons(static_cast<uint16_t>(port));
    const std::string ip = host.empty() ? "0.0.0.0" : host;
    if (::inet_pton(AF_INET, ip.c_str(), &addr4.sin_addr) == 1) addr = reinterpret_cast<sockaddr*>(&addr4);
  }
  if (!addr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-host ", host, ": expected a numeric IPv4 or IPv6 address of this machine"));
  }
  absl::StatusOr<Mhd> mhd = LoadMhd();
  if (!mhd.ok()) return absl::Status(mhd.status().code(), absl::StrCat("--metrics-port: ", mhd.status().message()));
  auto impl = std::make_unique<Impl>(std::move(*mhd));
  impl->daemon = impl->mhd.start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &Impl::Handle, impl.get(),
      MHD_OPTION_SOCK_ADDR, addr, MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 16u,
      MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(64 * 1024),
      MHD_OPTION_END);
  if (!impl->daemon) {
    return absl::UnavailableError(absl::StrCat("--metrics-port ", port, ": cannot listen on ", host.empty() ? "0.0.0.0" : host,
                                               ":", port, " (", strerror(errno), "); pick a free port"));
  }
  const MHD_DaemonInfo* info = impl->mhd.get_daemon_info(impl->daemon, MHD_DAEMON_INFO_BIND_PORT);
  const int bound = info ? info->port : port;
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl), bound));
}

void MetricsServer::Publish(std::string metrics_text, std::string status_json) {
  CheckedMutexLock lock(&impl_->mu);
  impl_->metrics = std::move(metrics_text);
  impl_->status = std::move(status_json);
}

}  // namespace dtrun::status
