// Which DDP replicas hold other state than the rest (issue 24): plain logic over the ranks'
// fingerprints, no LibTorch. Under DDP every rank must hold bit-identical parameters and optimizer
// state after every step; a rank that does not was corrupted (a flipped bit, a bad GPU, a bug).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::worker {

// The exit code of a worker whose job found its replicas diverged: it goes back to the newest
// state they agreed on (docs/DESIGN.md, "Replica checks").
inline constexpr int kReplicasDivergedExitCode = 78;

struct ReplicaVote {
  bool agreed = true;
  std::optional<uint64_t> majority;  // held by more than half the ranks (none: a tie, e.g. 2 ranks)
  std::vector<int> differing;        // ranks whose fingerprint is not the majority's (all, with none)
};

ReplicaVote VoteOnFingerprints(const std::vector<uint64_t>& by_rank);

// "the replicas diverged at step 120: rank 3 holds fingerprint 00ab.. where the other 7 hold
// 91fe..": one line, for stderr and the failure summary.
std::string DescribeDivergence(const ReplicaVote& vote, const std::vector<uint64_t>& by_rank, int64_t step);

// 16 lower-case hex digits.
std::string FingerprintHex(uint64_t fingerprint);

}  // namespace dtrun::worker
