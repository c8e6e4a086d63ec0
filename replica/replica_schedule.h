// Which snapshots travel to the buddy. Every rank of a job snapshots the same steps, so a rule of
// the steps alone makes every node copy the same ones, with no message between the nodes.
#pragma once

#include <cstdint>

namespace dtrun::replica {

// True when `newest` is the first snapshot at or past a multiple of `every`, given the rank's
// previous snapshot at `previous` (-1: none, so the first snapshot always travels).
inline bool CrossesBoundary(int64_t newest, int64_t previous, int every) {
  if (every <= 1) return newest > previous;
  auto floor_div = [every](int64_t s) { return s >= 0 ? s / every : -1; };
  return newest > previous && floor_div(newest) > floor_div(previous);
}

}  // namespace dtrun::replica
