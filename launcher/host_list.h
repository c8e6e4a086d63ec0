// The hosts of `dtrun -H` / `--hostfile` (horovodrun's and mpirun's spellings): which machines a job
// started from one host runs on, and how many workers each takes. Both come from outside (a
// command line, a file another tool wrote), so every name is checked before it reaches ssh.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun {

struct HostSlots {
  std::string name;  // as ssh takes it: HOST or USER@HOST (an IPv6 address without brackets)
  int slots = 0;     // workers on it; 0: --nproc-per-node decides
  // The part after USER@: what the other hosts connect to.
  std::string address() const;
  // The address as HOST:PORT needs it: an IPv6 address in brackets.
  std::string endpoint_host() const;
  // As the user wrote it: HOST:N, or [IPV6]:N.
  std::string spec() const;
};

inline constexpr int kMaxHosts = 10000;  // what the rendezvous is tested with

// "a:4,b:4,c" (horovodrun -H); an IPv6 address in brackets, "[fd00::2]:4" or "USER@[fd00::2]".
// InvalidArgument naming -H and the fix.
absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view value, int max_slots);

// A hostfile: one host a line, "HOST slots=N" (mpirun, DeepSpeed, horovodrun), "HOST:N" or
// "HOST" (an IPv6 address in brackets, as for -H); "#" starts a comment. `path` names the file in
// errors, with the line.
absl::StatusOr<std::vector<HostSlots>> ParseHostfile(absl::string_view text, const std::string& path, int max_slots);

}  // namespace dtrun
