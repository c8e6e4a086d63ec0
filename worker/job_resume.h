// Resume is a job-wide decision. Global rank 0 picks what to resume from: the newest checkpoint it
// can read, or none. Every rank then loads exactly those bytes, sent through the process group:
// model, optimizer, loss scaler and progress (epoch, position, step, best accuracy; the schedule
// and the loader's randomness follow from them). So ranks on nodes with their own disks, or whose
// newest local file differs, start from one state. Afterwards the ranks compare a digest of what
// they loaded and fail fast, naming both sides, if they disagree.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/checkpoint.h"
#include "worker/process_group.h"

namespace dtrun::worker {

struct ResumeRequest {
  std::string dir;   // OUTPUT/checkpoints (read on rank 0 only)
  std::string path;  // --resume, or empty for the newest in `dir`
};

// `pg` is null for a single process. FailedPrecondition if the ranks disagree after loading.
absl::StatusOr<std::optional<Progress>> ResumeJobWide(const ResumeRequest& request, ProcessGroupHandle* pg, int rank,
                                                      const torch::Device& device, torch::nn::Module& model,
                                                      torch::optim::Optimizer& optimizer, GradScaler* scaler);

}  // namespace dtrun::worker
