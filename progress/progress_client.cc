#include "progress/progress_client.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/env_names.h"

namespace dtrun::progress {

ProgressClient::ProgressClient() : ProgressClient([] {
  const char* path = ::getenv(env::kProgressSocket);
  return std::string(path ? path : "");
}()) {}

ProgressClient::ProgressClient(std::string socket_path) : path_(std::move(socket_path)) {
  if (path_.empty() || path_.size() >= sizeof(sockaddr_un::sun_path)) return;
  fd_ = UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

void ProgressClient::Send(const Report& report) const {
  if (!fd_.valid()) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  std::string text = FormatReport(report);
  // Best effort by design: a full queue or an agent that is gone costs the worker nothing.
  [[maybe_unused]] ssize_t n = ::sendto(fd_.get(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                                        reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
}

void ProgressClient::Hello(const std::string& lang) const {
  if (!fd_.valid()) return;
  ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(::getppid()), 0, 0, 0);
  Report r;
  r.kind = Report::Kind::kHello;
  r.lang = lang;
  Send(r);
}

void ProgressClient::Beat(int64_t step, int64_t samples) const {
  Report r;
  r.kind = Report::Kind::kBeat;
  r.step = step;
  r.samples = samples;
  Send(r);
}

void ProgressClient::TotalSteps(int64_t steps) const {
  Report r;
  r.kind = Report::Kind::kTotal;
  r.total_steps = steps;
  Send(r);
}

void ProgressClient::Begin(const std::string& section) const {
  Report r;
  r.kind = Report::Kind::kBegin;
  r.name = section;
  Send(r);
}

void ProgressClient::End(const std::string& section) const {
  Report r;
  r.kind = Report::Kind::kEnd;
  r.name = section;
  Send(r);
}

}  // namespace dtrun::progress
