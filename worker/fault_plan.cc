#include "worker/fault_plan.h"

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dtrun::worker {
namespace {

constexpr char kSlowVar[] = "DTRUN_FAULT_SLOW";
constexpr char kFlipVar[] = "DTRUN_FAULT_FLIP";
constexpr char kSlowForm[] = "RANK:FROM_STEP:MS, e.g. 1:20:150";
constexpr char kKillVar[] = "DTRUN_FAULT_KILL";
constexpr char kKillForm[] = "RANK:STEP[:segv|:throw|:before-backward], e.g. 1:10";
constexpr char kFlipForm[] = "RANK:STEP:PARAM:BIT, e.g. 0:30:fc.weight:30";

bool InRange(absl::string_view text, int64_t lo, int64_t hi, int64_t* out) {
  return absl::SimpleAtoi(text, out) && *out >= lo && *out <= hi;
}

absl::Status Bad(absl::string_view value, absl::string_view form) {
  return absl::InvalidArgumentError(absl::StrCat("'", value.substr(0, 200), "' is not ", form));
}

}  // namespace

absl::StatusOr<SlowFault> ParseSlowFault(absl::string_view value) {
  std::vector<absl::string_view> f = absl::StrSplit(value, ':');
  int64_t rank = 0, from = 0, ms = 0;
  if (f.size() != 3 || !InRange(f[0], 0, 1 << 24, &rank) || !InRange(f[1], 0, int64_t{1} << 40, &from) ||
      !InRange(f[2], 1, 60000, &ms)) {
    return Bad(value, kSlowForm);
  }
  return SlowFault{static_cast<int>(rank), from, static_cast<int>(ms)};
}

absl::StatusOr<FlipFault> ParseFlipFault(absl::string_view value) {
  std::vector<absl::string_view> f = absl::StrSplit(value, ':');
  int64_t rank = 0, step = 0, bit = 0;
  if (f.size() != 4 || !InRange(f[0], 0, 1 << 24, &rank) || !InRange(f[1], 1, int64_t{1} << 40, &step) ||
      f[2].empty() || f[2].size() > 256 || !InRange(f[3], 0, 63, &bit)) {
    return Bad(value, kFlipForm);
  }
  return FlipFault{static_cast<int>(rank), step, std::string(f[2]), static_cast<int>(bit)};
}

absl::StatusOr<KillFault> ParseKillFault(absl::string_view value) {
  std::vector<absl::string_view> f = absl::StrSplit(value, ':');
  int64_t rank = 0, step = 0;
  if (f.size() < 2 || f.size() > 3 ||
      (f.size() == 3 && f[2] != "segv" && f[2] != "throw" && f[2] != "before-backward") ||
      !InRange(f[0], 0, 1 << 24, &rank) || !InRange(f[1], 1, int64_t{1} << 40, &step)) {
    return Bad(value, kKillForm);
  }
  const KillFault::How how = f.size() == 2     ? KillFault::How::kSigkill
                             : f[2] == "segv"  ? KillFault::How::kSegfault
                             : f[2] == "throw" ? KillFault::How::kThrow
                                               : KillFault::How::kSigkillBeforeBackward;
  return KillFault{static_cast<int>(rank), step, how};
}

FaultPlan::FaultPlan(std::optional<SlowFault> slow, std::optional<FlipFault> flip, int rank,
                     std::optional<KillFault> kill) {
  if (slow && slow->rank == rank) slow_ = slow;
  if (flip && flip->rank == rank) flip_ = flip;
  if (kill && kill->rank == rank) kill_ = kill;
}

FaultPlan FaultPlan::FromEnvironment(int rank, int restart_count) {
  auto read = [](const char* var, auto parse) -> decltype(parse("")) {
    const char* v = std::getenv(var);
    if (v == nullptr) return absl::NotFoundError(var);
    auto parsed = parse(v);
    if (!parsed.ok()) {
      std::fprintf(stderr, "warning: %s: %s; this test fault is not armed\n", var,
                   std::string(parsed.status().message()).c_str());
    }
    return parsed;
  };
  absl::StatusOr<SlowFault> slow = read(kSlowVar, ParseSlowFault);
  absl::StatusOr<FlipFault> flip = read(kFlipVar, ParseFlipFault);
  absl::StatusOr<KillFault> kill = read(kKillVar, ParseKillFault);
  const bool first = restart_count == 0;
  return FaultPlan(slow.ok() ? std::optional<SlowFault>(*slow) : std::nullopt,
                   flip.ok() && first ? std::optional<FlipFault>(*flip) : std::nullopt, rank,
                   kill.ok() && first ? std::optional<KillFault>(*kill) : std::nullopt);
}

int FaultPlan::SlowMsBefore(int64_t next_step) const {
  return slow_ && next_step >= slow_->from_step ? slow_->ms : 0;
}

std::optional<FlipFault> FaultPlan::FlipAfter(int64_t step) {
  if (!flip_ || flip_->step != step) return std::nullopt;
  return std::exchange(flip_, std::nullopt);
}

bool FlipBit(void* data, size_t element_bytes, int bit) {
  if (bit < 0 || static_cast<size_t>(bit) >= element_bytes * 8) return false;
  static_cast<unsigned char*>(data)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  return true;
}

}  // namespace dtrun::worker
