// Resume is a job-wide decision. First choice: the newest in-memory snapshot step (memory_snapshot.h)
// that every rank holds, or that at least half of those holding any hold (restore_choice.h), taken
// in this world size or another (snapshot/peer_restores.h): each rank restores its own
// copy, a rank without one receives the lowest holder's through the process group, and the ranks
// then compare step, position and a digest of their parameters; when those differ (a snapshot
// the replicas had not compared yet when the crash came: step_agreement.h) that step is discarded
// and the next older one tried. Otherwise global rank 0 picks what to resume from: the
// newest checkpoint it can read, or none. Every rank then loads exactly those bytes, sent through the process group:
// model, optimizer, loss scaler and progress (epoch, position, step, best accuracy; the schedule
// and the loader's randomness follow from them). So ranks on nodes with their own disks, or whose
// newest local file differs, start from one state. Afterwards the ranks compare a digest of what
// they loaded and fail fast, naming both sides, if they disagree.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/checkpoint.h"
#include "worker/memory_snapshot.h"
#include "worker/process_group.h"
#include "worker/train_state.h"

namespace dtrun::worker {

struct ResumeRequest {
  std::string dir;   // OUTPUT/checkpoints (read on rank 0 only)
  std::string path;  // --resume, or empty for the newest in `dir` (an explicit path skips snapshots)
  MemorySnapshots* snapshots = nullptr;  // null: disk only
};

struct Resumed {
  std::optional<Progress> progress;  // nullopt: a fresh start
  std::string source = "none";       // memory | buddy | peer | disk | none
};

// `pg` is null for a single process. FailedPrecondition if the ranks disagree after loading.
// `state.progress` is left alone; the result carries what was resumed, its position as saved.
absl::StatusOr<Resumed> ResumeJobWide(const ResumeRequest& request, ProcessGroupHandle* pg, int rank,
                                      const torch::Device& device, const TrainState& state);

// ResumeJobWide for a trainer: `*state.progress` becomes the resumed position as saved (left as it
// is for a fresh start), and the agent is told where the state came from (`reports.Restored`).
absl::Status ResumeAndReport(const ResumeRequest& request, ProcessGroupHandle* pg, int rank,
                             const torch::Device& device, const TrainState& state,
                             const progress::ProgressClient& reports);

// Before training the resumed epoch: puts a position saved at another global batch (a world that
// grew or shrank, another --batch-size) on this run's `global_batch` samples a step
// (epoch_position.h), said once on rank 0, and records `global_batch` in `p`.
void ContinueAtGlobalBatch(Progress& p, int64_t global_batch, int rank);

}  // namespace dtrun::worker
