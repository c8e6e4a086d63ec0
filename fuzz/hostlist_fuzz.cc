// libFuzzer: Slurm's hostlist grammar (SLURM_JOB_NODELIST comes from the environment). Any bytes:
// nothing crashes or throws, the host count stays within its bound, no host is empty.
#include <cstddef>
#include <cstdint>

#include "launcher/slurm_hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view list(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<std::string>> hosts = dtrun::ExpandHostlist(list, 4096);
  if (!hosts.ok()) return 0;
  if (hosts->size() > 4096) __builtin_trap();
  for (const std::string& h : *hosts) {
    if (h.empty()) __builtin_trap();
  }
  return 0;
}
