// Which in-memory snapshot a job restores (docs/DESIGN.md, "Restoring from a peer's snapshot"),
// decided identically on every rank from the steps every rank holds (all-gathered). No LibTorch.
//
// The ranks of a data-parallel job hold the same state at the same step: the trainers seed every
// rank alike, broadcast the model's buffers and all-reduce the gradients, and the replica check
// (step_agreement.h) compares the replicas' fingerprints of every snapshot. So a rank that lacks a
// step (its node was lost, or it died while writing that snapshot) can take another rank's copy of
// it: the newest step that enough ranks hold wins, and the ranks without it receive the
// payload of the lowest rank that has it. Without that, a lost node's ranks had only what reached
// their buddy, up to --snapshot-buddy-every steps old, and every rank went back that far.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace dtrun::worker {

struct SnapshotChoice {
  int64_t step = -1;  // -1: no step; the job resumes from disk
  int source = -1;    // -1: every rank holds `step`; else the rank whose copy the others receive
  // The ranks that receive `source`'s copy (empty when source is -1).
  std::vector<int> receivers;
  // No step was held by enough ranks: `step` is that of the snapshot completed last.
  bool completed_last = false;

  bool receives(int rank) const { return std::find(receivers.begin(), receivers.end(), rank) != receivers.end(); }
};

// `held[r]`: the steps rank r can restore (any order; -1 entries are padding). With `peers` off,
// only a step that every rank holds. With it on, the newest step held by at least half (rounded
// up) of the ranks that hold any step: a lone stale holder, such as a rank that kept a snapshot
// from a line of steps the job has since gone back past, cannot decide for the rest, while ranks
// that hold nothing (a world that grew: its new nodes' ranks) have no say.
//
// With peers on and no step held by that many, the step of the snapshot completed last
// (`completed_ms[r][i]`: when rank r's snapshot of `held[r][i]` was completed, Unix ms; ties go
// to the higher step). That is a job killed on every node at once with --snapshot-dir-every: each
// node's agent copies on its own clock, so each node's file holds another step of the same line,
// and three nodes or more agree on none. A stale line's snapshots were all completed before the
// job went back past them, so they lose to the line it went on with. Without `completed_ms`
// (empty), no step means disk.
SnapshotChoice ChooseSnapshot(const std::vector<std::vector<int64_t>>& held, bool peers,
                              const std::vector<std::vector<int64_t>>& completed_ms = {});

// A receiver's check of the size `source` declared for its copy (-1: it could not read it),
// before anything is allocated: at most `capacity`, this rank's own slot.
absl::Status CheckPeerCopySize(int64_t size, uint64_t capacity, int source);

}  // namespace dtrun::worker
