#include "worker/restore_choice.h"

#include <algorithm>
#include <functional>
#include <set>

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
  const size_t quorum = peers ? (ranks + 1) / 2 : ranks;
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

}  // namespace dtrun::worker
