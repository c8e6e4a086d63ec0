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
  header.payload_bytes = payload.size();
  header.payload_hash = snapshot::PayloadHash(payload.data(), payload.size());
  absl::Status written = snapshot::PlaceSnapshot(region, header, [&](char* into) {
    std::memcpy(into, payload.data(), payload.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(written.ok()) << written;
}

inline void WriteTestSnapshot(int region_fd, const snapshot::SlotHeader& header, const std::string& payload) {
  absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(region_fd);
  ASSERT_TRUE(region.ok()) << region.status();
  WriteTestSnapshot(*region, header, payload);
}

}  // namespace dtrun::testing
