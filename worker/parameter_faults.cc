#include "worker/parameter_faults.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dtrun::worker {
namespace {

// What a bug in native code does: a member read through a null pointer.
__attribute__((noinline)) void WriteThroughABadPointer() {
  volatile uintptr_t address = 16;  // not a constant the compiler could see through
  *reinterpret_cast<volatile int*>(address) = 1;
}

}  // namespace

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
  std::vector<std::string> names;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) names.push_back(p.key());
  const size_t shown = std::min<size_t>(names.size(), 6);
  return absl::NotFoundError(absl::StrCat("the model has no parameter named '", flip.param, "' (it has ",
                                          absl::StrJoin(names.begin(), names.begin() + shown, ", "),
                                          names.size() > shown ? ", ..." : "", ")"));
}

void FaultsBeforeBackward(const FaultPlan& plan, int64_t next_step, int rank) {
  if (int ms = plan.SlowMsBefore(next_step); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  if (plan.KillBeforeBackward(next_step)) {
    std::fprintf(stderr, "rank %d: test fault: SIGKILL before the backward of step %lld\n", rank,
                 static_cast<long long>(next_step));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

void FlipIfPlanned(FaultPlan& plan, torch::nn::Module& model, int64_t step, int rank) {
  std::optional<FlipFault> flip = plan.FlipAfter(step);
  if (!flip) return;
  const absl::Status st = FlipParameterBit(model, *flip);
  const std::string what = st.ok() ? absl::StrFormat("flipped bit %d of %s after step %lld", flip->bit, flip->param,
                                                     static_cast<long long>(step))
                                   : std::string(st.message());
  std::fprintf(stderr, "rank %d: test fault: %s\n", rank, what.c_str());
}

void KillIfPlanned(const FaultPlan& plan, int64_t step, int rank) {
  std::optional<KillFault> kill = plan.KillAfter(step);
  if (!kill) return;
  const char* what = kill->how == KillFault::How::kSegfault ? "a write through a bad pointer"
                     : kill->how == KillFault::How::kThrow  ? "an exception"
                                                            : "SIGKILL";
  std::fprintf(stderr, "rank %d: test fault: %s after step %lld\n", rank, what, static_cast<long long>(step));
  std::fflush(stderr);
  if (kill->how == KillFault::How::kSegfault) WriteThroughABadPointer();
  if (kill->how == KillFault::How::kThrow) {
    throw std::runtime_error(absl::StrCat("test fault: bad batch after step ", step));
  }
  std::raise(SIGKILL);
}

}  // namespace dtrun::worker
