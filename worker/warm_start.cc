#include "worker/warm_start.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/env_names.h"
#include "base/park_message.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"

namespace dtrun::worker {
namespace {

std::atomic<bool> g_parks{false};

// Reads exactly `n` bytes (EINTR retried). False at EOF or on an error.
bool ReadExactly(int fd, char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, out + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

absl::StatusOr<std::string> ReadRelease(int fd) {
  std::string header;
  char c = 0;
  while (header.size() < kMaxReleaseHeaderBytes && ReadExactly(fd, &c, 1) && c != '\n') header.push_back(c);
  if (c != '\n') return absl::UnavailableError("dtrun closed the park pipe before releasing this worker");
  DT_ASSIGN_OR_RETURN(size_t n, DecodeReleaseSize(header));
  std::string payload(n, '\0');
  if (!ReadExactly(fd, payload.data(), payload.size())) {
    return absl::UnavailableError("dtrun closed the park pipe in the middle of a release");
  }
  return payload;
}

}  // namespace

bool ParksBeforeRounds() { return g_parks.load(); }

absl::Status AwaitRound() {
  g_parks = true;
  const char* text = std::getenv(env::kParkFd);
  if (text == nullptr) return absl::OkStatus();
  int fd = -1;
  if (!absl::SimpleAtoi(text, &fd) || fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(env::kParkFd, "=", std::string(text).substr(0, 32),
                                                   " names no open pipe; run this program under dtrun or unset it"));
  }
  UniqueFd pipe(fd);
  DT_ASSIGN_OR_RETURN(std::string payload, ReadRelease(pipe.get()));
  DT_ASSIGN_OR_RETURN(std::vector<std::string> env, DecodeReleaseEnv(payload));
  // Tools read /proc/PID/environ, which shows the block this process was started with, not
  // what setenv makes: rename the marker there in place, so that a released worker no longer
  // reads as parked (DTRUN_PARK_FD becomes DTRUN_WARM_FD, of the same length).
  static_assert(sizeof(env::kParkFd) == sizeof(env::kWarmFd));
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, env::kParkFd, sizeof(env::kParkFd) - 1) == 0 && (*e)[sizeof(env::kParkFd) - 1] == '=') {
      std::memcpy(*e, env::kWarmFd, sizeof(env::kWarmFd) - 1);
    }
  }
  // The round's environment replaces ours whole: a parked worker must see exactly what a worker
  // spawned for the round would.
  ::clearenv();
  for (const std::string& entry : env) {
    const size_t eq = entry.find('=');
    ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
  }
  return absl::OkStatus();
}

}  // namespace dtrun::worker
