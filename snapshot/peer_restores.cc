#include "snapshot/peer_restores.h"

#include <cstdlib>
#include <cstring>

#include "base/env_names.h"

namespace dtrun::snapshot {

bool PeerRestoresAllowed() {
  const char* v = std::getenv(env::kSnapshotPeers);
  return v == nullptr || (std::strcmp(v, "off") != 0 && std::strcmp(v, "0") != 0);
}

bool Restorable(const SlotHeader& h, uint64_t job, int64_t rank, int64_t world_size, bool peers) {
  if (h.job != job) return false;
  return peers || (h.rank == rank && h.world_size == world_size);
}

}  // namespace dtrun::snapshot
