// Checkpoints: rank 0 writes model, optimizer and progress atomically (temp file, fsync, rename)
// into DIR/checkpoint-<epoch>-<step>.pt, keeping the newest K; loading takes the newest that reads
// back whole, falling back (with a warning) past truncated or corrupt ones.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <optional>
#include <string>

#include <torch/torch.h>

#include "worker/grad_scaler.h"

namespace dtrun::worker {

struct Progress {
  int64_t epoch = 0;      // the epoch to continue
  int64_t next_batch = 0; // first batch of `epoch` not yet trained
  int64_t global_step = 0;
  double best_acc1 = 0;
  // Samples a step, job-wide (batch × world size), when the position was saved: a run with
  // another global batch rescales `next_batch` (epoch_position.h). 0: not recorded (an older file).
  // The trainer sets its own before resuming.
  int64_t global_batch = 0;
};

// Throws c10::Error / std::exception on I/O errors (the trainer reports them).
// Writes a checkpoint durably (every write, fsync of the file and of the directory checked; the
// temp file removed on failure) and keeps the newest `keep` checkpoint files. A full or read-only
// disk is ResourceExhausted with one line naming the file, the reason and the bytes needed.
absl::Status SaveCheckpoint(const std::string& dir, int keep, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, const Progress& progress,
                            const GradScaler* scaler = nullptr);
struct TrainState;
// The same for a trainer's declared state (train_state.h).
absl::Status SaveCheckpoint(const std::string& dir, int keep, const TrainState& state);
// At start, before any training: creates `dir`, removes temp files a crash left behind and proves
// it writable (a probe written, synced and removed). PermissionDenied naming the dir otherwise.
absl::Status PrepareCheckpointDir(const std::string& dir);

struct LoadedCheckpoint {
  Progress progress;
  std::string bytes;  // the file as read: what rank 0 sends to the other ranks
};

// Loads `path`, or the newest valid checkpoint in `dir` when `path` is empty. nullopt if none.
std::optional<LoadedCheckpoint> LoadCheckpoint(const std::string& dir, const std::string& path,
                                               torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                               GradScaler* scaler = nullptr);
// Loads a checkpoint's bytes (another rank's choice). All or nothing: on DataLoss the model and
// optimizer are as they were.
absl::StatusOr<Progress> LoadCheckpointBytes(const std::string& bytes, torch::nn::Module& model,
                                             torch::optim::Optimizer& optimizer, GradScaler* scaler = nullptr);

}  // namespace dtrun::worker
