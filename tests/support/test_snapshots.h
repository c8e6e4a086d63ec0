// Snapshots written into a region as a worker writes them (the slot a writer picks, the payload,
// then the header with its checksum), for tests of what reads, copies or keeps them.
#pragma once

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "snapshot/snapshot_region.h"

namespace dtrun::testing {

// `header`'s job, rank, world size, step, attempt and time, with `payload`'s size and checksum.
inline void WriteTestSnapshot(snapshot::MappedRegion& region, snapshot::SlotHeader header, const std::string& payload) {
  std::vector<absl::StatusOr<snapshot::SlotHeader>> slots;
  for (int s = 0; s < snapshot::kSlots; ++s) slots.push_back(region.Header(s));
  const int slot = snapshot::SlotToWrite(slots, header.step);
  region.Invalidate(slot);
  ASSERT_TRUE(region.Reserve(slot, payload.size()).ok());
  std::memcpy(region.Payload(slot), payload.data(), payload.size());
  header.payload_bytes = payload.size();
  header.payload_hash = snapshot::PayloadHash(payload.data(), payload.size());
  region.Commit(slot, header);
}

inline void WriteTestSnapshot(int region_fd, const snapshot::SlotHeader& header, const std::string& payload) {
  absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(region_fd);
  ASSERT_TRUE(region.ok()) << region.status();
  WriteTestSnapshot(*region, header, payload);
}

}  // namespace dtrun::testing
