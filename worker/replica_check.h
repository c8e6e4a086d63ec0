// Replica checks (issue 24; docs/DESIGN.md, "Replica checks"): DDP replicas must hold
// bit-identical parameters and optimizer state after every step. Before a trainer keeps a state
// (an in-memory snapshot, a disk checkpoint) every rank fingerprints its own and the ranks compare:
// one all-reduce of 4 numbers when they agree (the common case), a second one to learn every
// rank's fingerprint when they do not. A divergence is named (which ranks, their fingerprints and
// the majority's), reported to the agent, and ends the attempt with kReplicasDivergedExitCode
// before the diverged state is kept: the restart resumes from the newest snapshot, which the
// replicas agreed on when it was taken.
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

// What a trainer calls before it keeps `state` at `step`: nothing when the replicas agree (or
// there is one process). Otherwise each rank that differs reports `diverged` to its agent, rank
// 0 and those ranks say so on stderr, and every rank throws ReplicasDiverged (its main returns
// kReplicasDivergedExitCode).
void EnsureReplicasAgree(ProcessGroupHandle* pg, const torch::Device& device, const TrainState& state, int rank,
                         int world, int64_t step, const progress::ProgressClient& reports);
// The same with this rank's fingerprint already taken (by the snapshot copy).
void EnsureFingerprintsAgree(ProcessGroupHandle* pg, const torch::Device& device, uint64_t mine, int rank, int world,
                             int64_t step, const progress::ProgressClient& reports);
// EnsureFingerprintsAgree as a snapshot verifier (MemorySnapshots::SetVerifier): the check rides
// on the snapshot's copy. `pg` and `reports` must outlive the snapshots.
MemorySnapshots::Verifier ReplicaVerifier(ProcessGroupHandle* pg, const torch::Device& device, int rank, int world,
                                          const progress::ProgressClient& reports);

// Every rank calls it after the step's flags all-reduce counted `not_finite` ranks whose loss was
// NaN or infinite: when some but not all were, those ranks are named (an all-reduce says which),
// rank 0 and they say so on stderr, and every rank throws ReplicasDiverged. The gradient all-reduce
// has already spread the poison into every replica's parameters: only going back helps. All ranks
// non-finite is the model diverging, not a corrupted rank: nothing is done here then.
void EnsureLossFiniteOnAllOrNone(ProcessGroupHandle* pg, const torch::Device& device, bool mine_finite,
                                 double not_finite, int rank, int world, int64_t step);

// EnsureReplicasAgree with its cost counted, for the trainer's last lines.
class ReplicaChecks {
 public:
  void Ensure(ProcessGroupHandle* pg, const torch::Device& device, const TrainState& state, int rank, int world,
              int64_t step, const progress::ProgressClient& reports);
  // "12 replica checks, 4.1 ms each" ("" before the first).
  std::string Summary() const;

 private:
  int64_t count_ = 0;
  double seconds_ = 0;
};

}  // namespace dtrun::worker
