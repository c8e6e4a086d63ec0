// Whose in-memory snapshots a rank may restore (docs/DESIGN.md, "Restoring from a peer's
// snapshot"). The ranks of a data-parallel job are replicas: every rank's state at a step is the
// same, in whatever world size the job ran when it took it. So by default a rank may restore any
// rank's snapshot of the job: a peer's copy when its own is missing, and after the world size
// changed (an elastic job that lost or gained nodes, a run given other --nproc-per-node) the
// state the old world took, as a disk checkpoint would be loaded. DTRUN_SNAPSHOT_PEERS=off (or 0)
// is for a trainer whose ranks hold different state (a sharded model or optimizer, a generator
// seeded per rank): then a rank restores only its own snapshots of the current world size.
#pragma once

#include "snapshot/snapshot_region.h"

namespace dtrun::snapshot {

// From DTRUN_SNAPSHOT_PEERS, which the agent and its workers share.
bool PeerRestoresAllowed();

// Whether a rank (`rank` of `world_size` in `job`) may restore the snapshot `h` describes.
bool Restorable(const SlotHeader& h, uint64_t job, int64_t rank, int64_t world_size, bool peers);

}  // namespace dtrun::snapshot
