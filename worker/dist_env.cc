#include "worker/dist_env.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dtrun::worker {
namespace {

constexpr char kFix[] = "start the program under dtrun (or torchrun), or unset the variable for one process";

// The variable's value if it is set and not empty.
std::optional<std::string> Get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// The variable as a whole number in [low, high], `fallback` when it is unset.
absl::StatusOr<int> IntEnv(const char* name, int fallback, int low, int high) {
  std::optional<std::string> v = Get(name);
  if (!v) return fallback;
  int n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < low || n > high) {
    // A hostile value is shown bounded: it may be anything of any length.
    const std::string shown = v->size() > 40 ? v->substr(0, 40) + "..." : *v;
    return absl::InvalidArgumentError(absl::StrCat(name, "=", shown, " in the environment is not a whole number from ",
                                                   low, " to ", high, ": ", kFix));
  }
  return n;
}

absl::Status RankBelowSize(const char* rank_name, int rank, const char* size_name, int size, bool size_set) {
  if (rank < size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(rank_name, "=", rank, " but ", size_name,
                                                 size_set ? absl::StrCat("=", size) : std::string(" is not set"),
                                                 ": a rank must be below its size; ", kFix));
}

}  // namespace

absl::StatusOr<DistEnv> ReadDistEnv() {
  constexpr int kMany = 1 << 24;  // more ranks than any job has, fewer than an int's overflow
  DistEnv e;
  absl::StatusOr<int> rank = IntEnv("RANK", 0, 0, kMany);
  absl::StatusOr<int> world_size = IntEnv("WORLD_SIZE", 1, 1, kMany);
  absl::StatusOr<int> local_rank = IntEnv("LOCAL_RANK", 0, 0, kMany);
  absl::StatusOr<int> local_world_size = IntEnv("LOCAL_WORLD_SIZE", 1, 1, kMany);
  absl::StatusOr<int> master_port = IntEnv("MASTER_PORT", 0, 0, 65535);
  absl::StatusOr<int> restart_count = IntEnv("TORCHELASTIC_RESTART_COUNT", 0, 0, kMany);
  for (const absl::StatusOr<int>* v :
       {&rank, &world_size, &local_rank, &local_world_size, &master_port, &restart_count}) {
    if (!v->ok()) return v->status();
  }
  e.rank = *rank;
  e.world_size = *world_size;
  e.local_rank = *local_rank;
  e.local_world_size = *local_world_size;
  e.master_port = *master_port;
  e.restart_count = *restart_count;
  if (absl::Status st = RankBelowSize("RANK", e.rank, "WORLD_SIZE", e.world_size, Get("WORLD_SIZE").has_value());
      !st.ok()) {
    return st;
  }
  // Older launchers (torch.distributed.launch before 1.9) set LOCAL_RANK without LOCAL_WORLD_SIZE.
  if (Get("LOCAL_WORLD_SIZE")) {
    if (absl::Status st = RankBelowSize("LOCAL_RANK", e.local_rank, "LOCAL_WORLD_SIZE", e.local_world_size, true);
        !st.ok()) {
      return st;
    }
  }
  if (std::optional<std::string> a = Get("MASTER_ADDR")) e.master_addr = *a;
  e.use_agent_store = Get("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
  return e;
}

}  // namespace dtrun::worker
