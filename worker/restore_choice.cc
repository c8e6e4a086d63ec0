#include "worker/restore_choice.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dtrun::worker {
namespace {

bool Holds(const std::vector<int64_t>& steps, int64_t step) {
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

// `step` restored by every rank, from its own copy or, for the ranks without it, from the lowest
// rank that holds it.
SnapshotChoice ChoiceOf(const std::vector<std::vector<int64_t>>& held, int64_t step) {
  SnapshotChoice choice{step, -1, {}};
  for (size_t r = 0; r < held.size(); ++r) {
    if (!Holds(held[r], step)) {
      choice.receivers.push_back(static_cast<int>(r));
    } else if (choice.source < 0) {
      choice.source = static_cast<int>(r);
    }
  }
  if (choice.receivers.empty()) choice.source = -1;
  return choice;
}

// The step of the snapshot completed last (the higher step of a tie); none without times.
std::optional<int64_t> CompletedLast(const std::vector<std::vector<int64_t>>& held,
                                     const std::vector<std::vector<int64_t>>& completed_ms) {
  std::optional<std::pair<int64_t, int64_t>> last;  // (completed ms, step)
  for (size_t r = 0; r < held.size() && r < completed_ms.size(); ++r) {
    for (size_t i = 0; i < held[r].size() && i < completed_ms[r].size(); ++i) {
      if (held[r][i] < 0) continue;
      const std::pair<int64_t, int64_t> at{completed_ms[r][i], held[r][i]};
      if (!last || at > *last) last = at;
    }
  }
  if (!last) return std::nullopt;
  return last->second;
}

}  // namespace

SnapshotChoice ChooseSnapshot(const std::vector<std::vector<int64_t>>& held, bool peers,
                              const std::vector<std::vector<int64_t>>& completed_ms) {
  std::set<int64_t, std::greater<>> candidates;
  for (const std::vector<int64_t>& steps : held) {
    for (int64_t s : steps) {
      if (s >= 0) candidates.insert(s);
    }
  }
  // With peers: half of the ranks that hold anything. A rank that holds nothing (a node that just
  // joined, a rank whose snapshots were damaged) has no line of steps to vote for, and counting it
  // sent a job that grew past twice its size back to disk.
  const size_t holding = std::count_if(held.begin(), held.end(), [](const std::vector<int64_t>& steps) {
    return std::any_of(steps.begin(), steps.end(), [](int64_t s) { return s >= 0; });
  });
  const size_t quorum = peers ? (holding + 1) / 2 : held.size();
  for (int64_t step : candidates) {
    size_t holders = 0;
    for (const std::vector<int64_t>& steps : held) holders += Holds(steps, step);
    if (holders > 0 && holders >= quorum) return ChoiceOf(held, step);
  }
  if (!peers) return {};
  const std::optional<int64_t> last = CompletedLast(held, completed_ms);
  if (!last) return {};
  SnapshotChoice choice = ChoiceOf(held, *last);
  choice.completed_last = true;
  return choice;
}

absl::Status CheckPeerCopySize(int64_t size, uint64_t capacity, int source) {
  if (size < 0) return absl::UnavailableError(absl::StrCat("rank ", source, " could not read its copy"));
  if (static_cast<uint64_t>(size) > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat("rank ", source, "'s copy is ", size,
                                                     " bytes, more than this rank's slot of ", capacity,
                                                     " (give every node the same --snapshot-memory)"));
  }
  return absl::OkStatus();
}

}  // namespace dtrun::worker
