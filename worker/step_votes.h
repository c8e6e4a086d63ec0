// What the ranks of a job decide together after every optimizer step (docs/DESIGN.md, "Replica
// checks"), packed into the two numbers of one all-reduce (MAX). No LibTorch: the trainer
// all-reduces what EncodeStepVotes gives and reads the element-wise maximum with DecodeStepVotes.
//
// Two numbers, because an all-reduce's latency grows with its length when ranks share cores
// (Gloo's ring takes a round per chunk: 8 ranks on 2 cores, AMD EPYC, 2026-11-26: 1 double
// 2.6 ms, 2 doubles 3.2 ms, 4 doubles 7.1 ms, 16 doubles 20.8 ms). The first is the largest over
// the ranks of (loss not finite, check value, wish), the second the largest of its negation
// without the wish, i.e. the smallest: "any rank" and "every rank" for a bad loss, and whether
// every rank holds the same state kept last. That comparison used to be an all-reduce of its own
// at every snapshot, the most of a small snapshot's cost; here it rides on the step's all-reduce,
// one step later.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace dtrun::worker {

// One rank's wishes after a step.
struct StepWishes {
  bool stop = false;      // a stop signal arrived (SIGTERM, --signal)
  bool save = false;      // its disk-checkpoint timer ran out
  bool snapshot = false;  // its snapshot cadence says now
  bool loss_finite = true;
};

// A state this rank kept (a snapshot) whose fingerprint the other ranks have not yet seen.
struct PendingCheck {
  int64_t step = 0;
  uint64_t fingerprint = 0;  // worker::ReplicaFingerprint of the state
};

// What every rank learns from the all-reduce, the same on every rank. The strongest wish of any
// rank wins, and implies the weaker ones: a stop saves a checkpoint, a checkpoint is a snapshot.
struct StepVerdict {
  bool stop = false, save = false, snapshot = false;
  bool loss_not_finite_somewhere = false;
  bool loss_not_finite_everywhere = false;
  // Every rank had the same check pending (or none had one): its step and fingerprint, compared
  // as a 50-bit hash. Meaningless when the loss is not finite on some ranks only; those ranks
  // cannot be trusted, and the job goes back past the state kept last anyway.
  bool pending_agreed = true;
};

using StepVotes = std::array<double, 2>;

StepVotes EncodeStepVotes(const StepWishes& mine, const std::optional<PendingCheck>& pending);
// `maxed`: the element-wise maximum of every rank's EncodeStepVotes.
StepVerdict DecodeStepVotes(const StepVotes& maxed);

}  // namespace dtrun::worker
