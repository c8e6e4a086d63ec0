// Warm starts (docs/DESIGN.md, "Warm workers"). dtrun starts the next attempt's workers ahead of
// time and parks them once their libraries are loaded and their static set-up is done; a restart
// then releases them with the round's environment instead of paying exec, the dynamic loader and
// LibTorch's start again. A program opts in by calling AwaitRound() before it reads anything of
// its environment that depends on the round (rank, world size, master, restart count): the
// agent parks successors only for programs whose workers said so in their hello. No LibTorch.
#pragma once

#include "absl/status/status.h"

namespace dtrun::worker {

// When this process was started parked (DTRUN_PARK_FD): blocks until the agent releases it, then
// replaces the whole environment with the round's. Otherwise returns at once. An error (the agent
// went away, a malformed message) means the process must exit: it belongs to no round.
absl::Status AwaitRound();
// Whether this process called AwaitRound: its hello tells the agent it may park successors.
bool ParksBeforeRounds();

}  // namespace dtrun::worker
