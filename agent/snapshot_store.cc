#include "agent/snapshot_store.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrun {

absl::StatusOr<SnapshotStore> SnapshotStore::Create(int nproc_per_node, uint64_t bytes_per_worker, bool with_replicas) {
  SnapshotStore store;
  if (bytes_per_worker == 0) return store;
  for (int lr = 0; lr < nproc_per_node; ++lr) {
    DT_ASSIGN_OR_RETURN(UniqueFd own, snapshot::CreateRegion(bytes_per_worker, absl::StrCat("dtrun-snapshot-", lr)));
    store.regions_.push_back(std::move(own));
    if (!with_replicas) continue;
    DT_ASSIGN_OR_RETURN(UniqueFd replica,
                        snapshot::CreateRegion(bytes_per_worker, absl::StrCat("dtrun-replica-", lr)));
    store.replicas_.push_back(std::move(replica));
  }
  return store;
}

int SnapshotStore::replica_fd(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(replicas_.size())) return -1;
  return replicas_[local_rank].get();
}

int SnapshotStore::fd(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(regions_.size())) return -1;
  return regions_[local_rank].get();
}

std::optional<snapshot::SlotHeader> SnapshotStore::Newest(int local_rank) const {
  const int region = fd(local_rank);
  if (region < 0) return std::nullopt;
  return snapshot::Newest(snapshot::ReadHeaders(region));
}

uint64_t DefaultSnapshotBytes(int nproc_per_node) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const uint64_t memory = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  const uint64_t share = memory / 4 / static_cast<uint64_t>(std::max(1, nproc_per_node));
  return std::max(snapshot::kMinRegionBytes, std::min<uint64_t>(share, uint64_t{64} << 30));
}

}  // namespace dtrun
