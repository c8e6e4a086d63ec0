#include "worker/restore_choice.h"

#include <algorithm>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"

namespace dtrun::worker {
namespace {

bool Holds(const std::vector<int64_t>& steps, int64_t step) {
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

}  // namespace

SnapshotChoice ChooseSnapshot(const std::vector<std::vector<int64_t>>& held, bool peers) {
  std::set<int64_t, std::greater<>> candidates;
  for (const std::vector<int64_t>& steps : held) {
    for (int64_t s : steps) {
      if (s >= 0) candidates.insert(s);
    }
  }
  const size_t ranks = held.size();
  // With peers: half of the ranks that hold anything. A rank that holds nothing (a node that just
  // joined, a rank whose snapshots were damaged) has no line of steps to vote for, and counting it
  // sent a job that grew past twice its size back to disk.
  const size_t holding = std::count_if(held.begin(), held.end(), [](const std::vector<int64_t>& steps) {
    return std::any_of(steps.begin(), steps.end(), [](int64_t s) { return s >= 0; });
  });
  const size_t quorum = peers ? (holding + 1) / 2 : ranks;
  for (int64_t step : candidates) {
    size_t holders = 0;
    for (const std::vector<int64_t>& steps : held) holders += Holds(steps, step);
    if (holders == 0 || holders < quorum) continue;
    SnapshotChoice choice{step, -1, {}};
    if (holders == ranks) return choice;
    for (size_t r = 0; r < ranks; ++r) {
      if (!Holds(held[r], step)) {
        choice.receivers.push_back(static_cast<int>(r));
      } else if (choice.source < 0) {
        choice.source = static_cast<int>(r);
      }
    }
    return choice;
  }
  return {};
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
