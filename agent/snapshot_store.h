// The agent's in-memory snapshot store (snapshot/snapshot_region.h): one region per local rank,
// created when the agent starts and kept for its whole life while workers come and go, so a
// worker's crash loses no snapshot; memfds vanish with their last descriptor, so nothing outlives
// dtrun. The agent hands each worker its local rank's region and reads only headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "snapshot/snapshot_region.h"

namespace dtrun {

class SnapshotStore {
 public:
  SnapshotStore() = default;  // off: no regions
  // `bytes_per_worker` 0: off. `with_replicas`: a second region per local rank for the copies that
  // also live on the buddy (agent/replicator.h). ResourceExhausted names what could not be made.
  static absl::StatusOr<SnapshotStore> Create(int nproc_per_node, uint64_t bytes_per_worker, bool with_replicas = false);

  bool enabled() const { return !regions_.empty(); }
  // The fd a worker of `local_rank` inherits (-1 when off).
  int fd(int local_rank) const;
  // The fd of `local_rank`'s replica region (-1: none): the snapshots this node also copied to its
  // buddy, or fetched from it. Workers restore from it too.
  int replica_fd(int local_rank) const;
  int nproc() const { return static_cast<int>(regions_.size()); }
  // The newest complete snapshot in `local_rank`'s region (its header only), if any.
  std::optional<snapshot::SlotHeader> Newest(int local_rank) const;

 private:
  std::vector<UniqueFd> regions_;
  std::vector<UniqueFd> replicas_;
};

// The default per-worker cap: a quarter of this machine's memory shared by its workers, at most
// 64 GiB each. Regions take memory only as snapshots are written.
uint64_t DefaultSnapshotBytes(int nproc_per_node);

}  // namespace dtrun
