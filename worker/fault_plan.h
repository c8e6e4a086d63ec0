// Test-only faults the worker library takes from its environment, for the straggler and
// silent-corruption tests and benches (issue 24). Unset, nothing changes. No LibTorch here: the
// trainer asks what to do at each step and does it.
//
//   DTRUN_FAULT_SLOW=RANK:FROM_STEP:MS      rank RANK sleeps MS ms before its backward (so each of
//                                           its gradients reaches the all-reduce late) in every step
//                                           that makes global step FROM_STEP or a later one
//   DTRUN_FAULT_FLIP=RANK:STEP:PARAM:BIT    rank RANK flips bit BIT of the first element of the
//                                           parameter named PARAM right after the optimizer step
//                                           that makes global step STEP
//   DTRUN_FAULT_KILL=RANK:STEP[:HOW]        rank RANK SIGKILLs itself right after the optimizer step
//                                           that makes global step STEP (after a flip due then),
//                                           before the ranks' all-reduce that ends that step; HOW
//                                           `segv`: it writes through a bad pointer instead, `throw`:
//                                           it throws std::runtime_error out of the step,
//                                           `before-backward`: it SIGKILLs itself earlier, before the
//                                           backward of that step (its peers are then in the
//                                           step's gradient all-reduce, a snapshot of the step
//                                           before still being copied)
//
// A value that does not parse is one line on stderr naming the variable and the form, and the
// fault is not armed: a typo must never look like a clean run to a test that expected a fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun::worker {

struct SlowFault {
  int rank = 0;
  int64_t from_step = 0;
  int ms = 0;  // 1..60000
};

struct FlipFault {
  int rank = 0;
  int64_t step = 0;
  std::string param;  // a parameter's name as named_parameters() gives it
  int bit = 0;        // 0..63, and below the element's size in bits
};

struct KillFault {
  enum class How { kSigkill, kSegfault, kThrow, kSigkillBeforeBackward };
  int rank = 0;
  int64_t step = 0;
  How how = How::kSigkill;
};

// Parse one variable's value. InvalidArgument says what is wrong and the expected form.
absl::StatusOr<SlowFault> ParseSlowFault(absl::string_view value);
absl::StatusOr<FlipFault> ParseFlipFault(absl::string_view value);
absl::StatusOr<KillFault> ParseKillFault(absl::string_view value);

class FaultPlan {
 public:
  // From DTRUN_FAULT_SLOW / _FLIP / _KILL, for this process's global rank. A flip and a kill are
  // armed in the first attempt only (`restart_count` 0): the attempt that goes back past it must not meet
  // it again, or a test of the way back would loop until the restarts ran out.
  static FaultPlan FromEnvironment(int rank, int restart_count = 0);
  FaultPlan() = default;
  FaultPlan(std::optional<SlowFault> slow, std::optional<FlipFault> flip, int rank,
            std::optional<KillFault> kill = std::nullopt);

  // Milliseconds to sleep before the backward of the step that will make `next_step` (0: none).
  int SlowMsBefore(int64_t next_step) const;
  // The flip due right after the optimizer step that made `step`, once (nullopt: none).
  std::optional<FlipFault> FlipAfter(int64_t step);
  // Whether this process is to die right after the optimizer step that made `step`.
  std::optional<KillFault> KillAfter(int64_t step) const {
    return kill_ && kill_->step == step && kill_->how != KillFault::How::kSigkillBeforeBackward ? kill_ : std::nullopt;
  }
  // Whether it is to die before the backward of the step that will make `next_step`.
  bool KillBeforeBackward(int64_t next_step) const {
    return kill_ && kill_->step == next_step && kill_->how == KillFault::How::kSigkillBeforeBackward;
  }

 private:
  std::optional<SlowFault> slow_;
  std::optional<FlipFault> flip_;
  std::optional<KillFault> kill_;
};

// Flips bit `bit` of the element at `data` (`element_bytes` wide). False, and nothing changed,
// when the bit is outside the element.
bool FlipBit(void* data, size_t element_bytes, int bit);

}  // namespace dtrun::worker
