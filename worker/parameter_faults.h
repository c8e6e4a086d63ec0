// Applies the test-only faults of worker/fault_plan.h to a model (LibTorch side).
#pragma once

#include <torch/torch.h>

#include "absl/status/status.h"
#include "worker/fault_plan.h"

namespace dtrun::worker {

// Flips the bit of the parameter's first element, wherever it lives (CPU or GPU). NotFound names
// the parameter when the model has none by that name; InvalidArgument a bit beyond the element.
absl::Status FlipParameterBit(torch::nn::Module& model, const FlipFault& flip);

// What a trainer calls in its step: before the backward of the step that makes `next_step`, sleeps
// or dies by SIGKILL (said on stderr first); right after the optimizer step that made `step`,
// flips, as `plan` says (a flip is said on stderr by the rank that does it).
void FaultsBeforeBackward(const FaultPlan& plan, int64_t next_step, int rank);
void FlipIfPlanned(FaultPlan& plan, torch::nn::Module& model, int64_t step, int rank);
// Dies by SIGKILL, by a write through a bad pointer (SIGSEGV), or throws std::runtime_error, said
// on stderr first, if `plan` says so after the optimizer step that made `step`: a crash between a
// snapshot's commit and the next step's replica check.
void KillIfPlanned(const FaultPlan& plan, int64_t step, int rank);

}  // namespace dtrun::worker
