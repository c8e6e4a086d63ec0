#include "worker/parameter_faults.h"

#include "absl/strings/str_cat.h"

namespace dtrun::worker {

absl::Status FlipParameterBit(torch::nn::Module& model, const FlipFault& flip) {
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (p.key() != flip.param) continue;
    torch::NoGradGuard no_grad;
    torch::Tensor first = p.value().detach().view(-1).narrow(0, 0, 1);
    torch::Tensor host = first.to(torch::kCPU).contiguous().clone();
    if (!FlipBit(host.data_ptr(), host.element_size(), flip.bit)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bit ", flip.bit, " is beyond an element of ", flip.param, " (", host.element_size(), " bytes)"));
    }
    first.copy_(host);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("the model has no parameter named '", flip.param, "'"));
}

}  // namespace dtrun::worker
