#include "worker/step_votes.h"

#include "base/mix64.h"

namespace dtrun::worker {
namespace {

// value = not_finite * 2^52 + check * 4 + wish, below 2^53: exact in a double.
constexpr uint64_t kNotFiniteBit = uint64_t{1} << 52;
constexpr uint64_t kCheckValues = (uint64_t{1} << 50) - 1;  // checks are 1..kCheckValues; 0 is none
enum Wish : uint64_t { kNone = 0, kSnapshot = 1, kSave = 2, kStop = 3 };

uint64_t CheckValue(const std::optional<PendingCheck>& pending) {
  if (!pending) return 0;
  const uint64_t h = Mix64(pending->fingerprint ^ Mix64(static_cast<uint64_t>(pending->step)));
  return 1 + h % kCheckValues;
}

Wish StrongestOf(const StepWishes& w) { return w.stop ? kStop : w.save ? kSave : w.snapshot ? kSnapshot : kNone; }

}  // namespace

StepVotes EncodeStepVotes(const StepWishes& mine, const std::optional<PendingCheck>& pending) {
  const uint64_t bad = mine.loss_finite ? 0 : kNotFiniteBit;
  const uint64_t check = CheckValue(pending) << 2;
  return {static_cast<double>(bad + check + StrongestOf(mine)), -static_cast<double>(bad + check)};
}

StepVerdict DecodeStepVotes(const StepVotes& maxed) {
  StepVerdict v;
  constexpr double kLimit = static_cast<double>(uint64_t{1} << 53);
  if (!(maxed[0] >= 0 && maxed[0] < kLimit && -maxed[1] >= 0 && -maxed[1] < kLimit)) {
    v.pending_agreed = false;  // not what any rank sent: compare the fingerprints themselves
    return v;
  }
  const auto largest = static_cast<uint64_t>(maxed[0]);
  const auto smallest = static_cast<uint64_t>(-maxed[1]);
  const uint64_t wish = largest & 3;
  v.stop = wish >= kStop;
  v.save = wish >= kSave;
  v.snapshot = wish >= kSnapshot;
  v.loss_not_finite_somewhere = (largest & kNotFiniteBit) != 0;
  v.loss_not_finite_everywhere = (smallest & kNotFiniteBit) != 0;
  v.pending_agreed = ((largest & ~kNotFiniteBit) >> 2) == ((smallest & ~kNotFiniteBit) >> 2);
  return v;
}

}  // namespace dtrun::worker
