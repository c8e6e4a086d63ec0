// The distributed layout a worker reads from its launcher's environment (dtrun or torchrun).
// Without a launcher it describes a single process (world size 1). No LibTorch needed.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dtrun::worker {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE: the launcher hosts the store
  int restart_count = 0;         // TORCHELASTIC_RESTART_COUNT: selects the store prefix

  bool distributed() const { return world_size > 1; }
};

// InvalidArgument, naming the variable and the fix, where a variable is set to something that is
// not a whole number in its range, or the ranks do not fit the sizes (RANK=3 with WORLD_SIZE=2):
// such a worker would otherwise take rank 0, or wait for ranks that never come.
absl::StatusOr<DistEnv> ReadDistEnv();

}  // namespace dtrun::worker
