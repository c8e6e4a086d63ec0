// Applies the test-only faults of worker/fault_plan.h to a model (LibTorch side).
#pragma once

#include <torch/torch.h>

#include "absl/status/status.h"
#include "worker/fault_plan.h"

namespace dtrun::worker {

// Flips the bit of the parameter's first element, wherever it lives (CPU or GPU). NotFound names
// the parameter when the model has none by that name; InvalidArgument a bit beyond the element.
absl::Status FlipParameterBit(torch::nn::Module& model, const FlipFault& flip);

}  // namespace dtrun::worker
