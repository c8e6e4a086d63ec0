// Parsers of single launch flag values (torchrun's syntax). Errors are InvalidArgument with a
// one-line message naming the flag and the fix.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "agent/agent_options.h"
#include "launcher/host_probe.h"

namespace dtrun {

absl::StatusOr<std::pair<int, int>> ParseNnodes(const std::string& value);
// --nproc-per-node: a number, or what cpu, gpu (cuda), xpu or auto count on this host for workers
// that inherit `env` (its visibility variables), with a line saying what was counted from where.
struct NprocPerNode {
  int count = 0;
  std::string counted;  // "" for a number
};
absl::StatusOr<NprocPerNode> ParseNprocPerNode(const std::string& value, const HostProbe& host = ThisHost(),
                                               const std::map<std::string, std::string>& env = {});
absl::StatusOr<std::map<int, StreamMask>> ParseStreamSpec(const std::string& flag,
                                                          const std::string& value, int nproc);
absl::StatusOr<std::map<std::string, std::string>> ParseRdzvConf(const std::string& value);
// --section-timeout "step=60,checkpoint=900".
absl::StatusOr<std::map<std::string, std::chrono::milliseconds>> ParseSectionTimeouts(const std::string& value);

}  // namespace dtrun
