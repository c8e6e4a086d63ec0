// Replica checks (issue 24; docs/DESIGN.md, "Replica checks"): DDP replicas must hold
// bit-identical parameters and optimizer state after every step. Every state a trainer keeps (an
// in-memory snapshot, a disk checkpoint) is fingerprinted by every rank and compared: in the next
// step's all-reduce for a snapshot (worker/step_agreement.h), at once before a checkpoint. Only
// when they differ does a second all-reduce give every rank every fingerprint. A divergence is
// named (which ranks, their fingerprints and the majority's), reported to the agent, and ends the
// attempt with kReplicasDivergedExitCode, the diverged state discarded: the restart resumes from
// the newest state the replicas agreed on.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "progress/progress_client.h"
#include "worker/memory_snapshot.h"
#include "worker/process_group.h"
#include "worker/replica_vote.h"
#include "worker/train_state.h"

namespace dtrun::worker {

// Every rank's `digest` equal? Max and -min of each entry in one all-reduce; every rank gets the
// same answer.
bool RanksAgree(ProcessGroupHandle& pg, const torch::Device& device, const std::vector<double>& digest);

// Every rank calls it at the same point. `by_rank` is filled only when they disagree.
ReplicaVote CompareReplicas(ProcessGroupHandle& pg, const torch::Device& device, uint64_t mine, int rank, int world,
                            std::vector<uint64_t>& by_rank);

class ReplicasDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every rank calls it at the same point with its fingerprint of the state it keeps at `step`:
// nothing when the replicas agree (or there is one process). Otherwise each rank that differs
// reports `diverged` to its agent, rank 0 and those ranks say so on stderr, and every rank throws
// ReplicasDiverged (its main returns kReplicasDivergedExitCode).
void EnsureFingerprintsAgree(ProcessGroupHandle* pg, const torch::Device& device, uint64_t mine, int rank, int world,
                             int64_t step, const progress::ProgressClient& reports);

// Every rank calls it once the step's vote said the loss is NaN or infinite on some ranks but
// not all (all of them is the model diverging, not a corrupted rank: left to the user). Names
// those ranks (an all-reduce says which), rank 0 and they say so on stderr, and every rank throws
// ReplicasDiverged. The gradient all-reduce has already spread the poison into every replica's
// parameters: only going back helps.
[[noreturn]] void ThrowLossNotFiniteOnSomeRanks(ProcessGroupHandle& pg, const torch::Device& device,
                                                bool mine_finite, int rank, int world, int64_t step);

}  // namespace dtrun::worker
