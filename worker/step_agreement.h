// What a trainer does after each optimizer step to decide, with every other rank, what comes next
// (stop, a disk checkpoint, a snapshot) and to keep only states the replicas agree on (docs/
// DESIGN.md, "Replica checks"). Both example trainers use it; a third gets the same by calling it.
//
// The comparison of a snapshot's fingerprint is deferred: the snapshot is committed at once and
// compared in the next step's all-reduce, which every step takes anyway (worker/step_votes.h), so
// a snapshot costs its copy and nothing else. Only then is the agent told of it, so a buddy copy
// is only ever made of a state the replicas agreed on. A rank that crashes in between leaves an
// unchecked snapshot behind; the restore compares the restored states across the ranks and goes
// back past it when they differ (worker/job_resume.h). Before a disk checkpoint the comparison is
// made at once, with an all-reduce of its own: nothing diverged is written to disk.
//
// Several processes on GPUs read the vote a step later (Propose, then TakeVerdict): its
// all-reduce is queued behind the step like the step's own collectives, and read back once the
// next step is queued, so the host never waits for the GPU to drain (docs/DESIGN.md, "The step on
// a GPU"). Every rank then acts on the verdict one step later, at the same step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "progress/progress_client.h"
#include "worker/collective_watchdog.h"
#include "worker/device_step.h"
#include "worker/memory_snapshot.h"
#include "worker/process_group.h"
#include "worker/step_votes.h"
#include "worker/stop_signal.h"
#include "worker/train_state.h"

namespace dtrun::worker {

// Whether a trainer should read the vote a step later (Propose and TakeVerdict) rather than at
// once (Decide): DTRUN_STEP_VOTE ("lagged", "at-once") if set, else `by_default`. Another value
// is said on stderr once and the default kept.
bool StepVotesLagged(bool by_default);

class StepAgreement {
 public:
  // `snapshots` is null where this rank has no region (not under dtrun, --snapshot-memory 0); it
  // becomes this object's verifier. Every pointer and `reports` must outlive this object. `pg` is
  // null for a single process.
  StepAgreement(ProcessGroupHandle* pg, const torch::Device& device, int rank, int world,
                const progress::ProgressClient& reports, CollectiveWatchdog* watchdog, MemorySnapshots* snapshots);
  // Unwinding from an exception (most often a collective with a rank that is gone), this rank's
  // armed state is still whole: it is kept in memory on the way out (MemorySnapshots::Rescue).
  ~StepAgreement();
  StepAgreement(const StepAgreement&) = delete;
  StepAgreement& operator=(const StepAgreement&) = delete;

  // One all-reduce, after the optimizer step that made `step`. Throws ReplicasDiverged (said on
  // stderr and to the agent first) when the loss is not finite on some ranks only, or when the
  // state kept last differs between ranks; a snapshot of that state is discarded first.
  StepVerdict Decide(const StepWishes& mine, int64_t step);

  // Decide in two halves, for a step queued on the GPU: Propose queues the all-reduce (behind the
  // work queued on the current stream) and returns at once; TakeVerdict, called once the next
  // step is queued, reads the verdict (nullopt when nothing was proposed) with the same checks and
  // throws as Decide. At most one vote is in flight: Propose takes an earlier one first. With Gloo
  // the all-reduce runs on Gloo's thread meanwhile. One process: decided in Propose, handed over
  // in TakeVerdict.
  void Propose(const StepWishes& mine, int64_t step);
  std::optional<StepVerdict> TakeVerdict();

  // Keeps `state`, positioned at (epoch, next_batch), as a snapshot (without a region: only its
  // fingerprint), compared at the next Decide or Propose. A snapshot that cannot be taken is said
  // on stderr and training goes on: the previous one (or the disk checkpoint) stays the way back.
  void Snapshot(const TrainState& state, int64_t epoch, int64_t next_batch);
  // Completes a snapshot whose copy runs alongside the step (DTRUN_SNAPSHOT_COPY=background) and
  // disarms the snapshot on failure. Call it before the parameters change again.
  void FinishSnapshot();
  // The same before a step queued on the GPU with nothing read back: a snapshot of a state on the
  // GPU is ordered before the step on the GPU (the host does not wait for its copy) and committed
  // once its copier is done, here or at the next snapshot. With several processes this is
  // FinishSnapshot: every rank must commit (and so compare) a snapshot at the same step.
  void FinishSnapshotBeforeDeviceStep();
  // After each optimizer step, before Decide: the state a failure before the next optimizer step
  // keeps in memory (MemorySnapshots::Arm), from a stop signal's thread or from this object's
  // destructor when an exception leaves the training loop.
  void Arm(const TrainState& state, int64_t epoch, int64_t next_batch);
  // Snapshot, then the comparison at once: what a disk checkpoint waits for.
  void SnapshotAndCompare(const TrainState& state, int64_t epoch, int64_t next_batch);

  // "replica checks: 40 in the steps' all-reduce, 2 apart (1.2 ms each)" ("" before the first).
  std::string Summary() const;

 private:
  struct Kept {  // a snapshot committed and not yet reported to the agent
    int64_t step;
    int64_t bytes;
    int64_t cost_us;
  };
  // A vote proposed and not yet read, with the checks and snapshots it settles.
  struct Proposal {
    StepWishes mine;
    int64_t step = 0;
    std::optional<PendingCheck> pending;
    std::vector<Kept> kept;
    torch::Tensor votes;  // the all-reduce's tensor (on the GPU with NCCL)
    c10::intrusive_ptr<c10d::Work> work;
    bool read_behind = false;  // its copy to the host is queued on the stream (readback_)
    std::optional<StepVerdict> alone;  // one process: decided at once
  };
  bool Alone() const { return pg_ == nullptr || world_ < 2; }
  void Expect(int64_t step, uint64_t fingerprint);
  void CommitAndKeep();
  // The checks a verdict settles for `pending` and the snapshots `kept` since the last one.
  void Settle(const StepVerdict& verdict, const StepWishes& mine, int64_t step, std::optional<PendingCheck> pending,
              std::vector<Kept> kept);
  void Agreed(const std::vector<Kept>& kept);
  void DiscardKept(const std::vector<Kept>& kept);
  [[noreturn]] void Diverged(const std::optional<PendingCheck>& pending, const std::vector<Kept>& kept);
  StepVotes AllReduceMax(const StepVotes& votes);
  torch::Device CollectiveDevice() const;

  ProcessGroupHandle* pg_;
  torch::Device device_;
  int rank_, world_;
  const progress::ProgressClient& reports_;
  CollectiveWatchdog* watchdog_;
  MemorySnapshots* snapshots_;
  // What the ranks compare next: the newest step kept since the last comparison, and the
  // fingerprints of every state kept since, combined in order.
  std::optional<PendingCheck> pending_;
  std::vector<Kept> kept_;
  std::optional<Proposal> proposal_;
  LaggedReadback readback_;  // a proposal's maxed votes, read behind the stream
  int64_t riding_ = 0, apart_ = 0;
  double apart_s_ = 0;
  // dtrun stops the ranks that survive a failure with SIGTERM; this keeps their state (last, so
  // that it stops first).
  std::optional<StopSignalWatcher> rescue_on_stop_;
};

}  // namespace dtrun::worker
