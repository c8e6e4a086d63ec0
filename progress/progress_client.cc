#include "progress/progress_client.h"

#include <algorithm>

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

ProgressClient::ProgressClient(const std::string& socket_path) {
  if (socket_path.empty() || socket_path.size() >= sizeof(addr_.sun_path)) return;
  addr_.sun_family = AF_UNIX;
  memcpy(addr_.sun_path, socket_path.c_str(), socket_path.size() + 1);
  fd_ = UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

void ProgressClient::Send(const Report& report) const {
  if (!fd_.valid()) return;
  std::string text = FormatReport(report);
  // Best effort by design: a full queue or an agent that is gone costs the worker nothing.
  [[maybe_unused]] ssize_t n = ::sendto(fd_.get(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                                        reinterpret_cast<const sockaddr*>(&addr_), sizeof(addr_));
}

void ProgressClient::Hello(const std::string& lang, bool warm) const {
  if (!fd_.valid()) return;
  ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(::getppid()), 0, 0, 0);
  Report r;
  r.kind = Report::Kind::kHello;
  r.lang = lang;
  r.warm = warm;
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

void ProgressClient::Keeping(int64_t step, int64_t bytes) const {
  Report r;
  r.kind = Report::Kind::kKeeping;
  r.step = step;
  r.bytes = bytes;
  Send(r);
}

void ProgressClient::Kept(int64_t step) const {
  Report r;
  r.kind = Report::Kind::kKept;
  r.step = step;
  Send(r);
}

void ProgressClient::NotKept(int64_t step) const {
  Report r;
  r.kind = Report::Kind::kNotKept;
  r.step = step;
  Send(r);
}

void ProgressClient::Snapshot(int64_t step, int64_t bytes, int64_t micros) const {
  Report r;
  r.kind = Report::Kind::kSnapshot;
  r.step = step;
  r.bytes = bytes;
  r.micros = micros;
  Send(r);
}

void ProgressClient::Restored(const std::string& source, int64_t step) const {
  Report r;
  r.kind = Report::Kind::kRestored;
  r.source = source;
  if (step >= 0) r.step = step;
  Send(r);
}

void ProgressClient::Sync(int64_t step, double wait_s, double step_s) const {
  static const bool kOff = [] {
    const char* v = ::getenv(env::kSyncReports);
    return v && std::string(v) == "0";
  }();
  if (!enabled() || step < 0 || kOff) return;
  Report r;
  r.kind = Report::Kind::kSync;
  r.step = step;
  r.wait_micros = static_cast<int64_t>(std::max(0.0, wait_s) * 1e6);
  r.step_micros = static_cast<int64_t>(std::max(0.0, step_s) * 1e6);
  Send(r);
}

void ProgressClient::Diverged(int64_t step, const std::string& fingerprint, const std::string& majority) const {
  Report r;
  r.kind = Report::Kind::kDiverged;
  r.step = step;
  r.fingerprint = fingerprint;
  r.majority = majority;
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
