// Snapshots written into a region as a worker writes them (the slot a writer picks, the payload,
// then the header with its checksum), for tests of what reads, copies or keeps them.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "agent/snapshot_store.h"
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

// A node's store of snapshot regions for two local ranks, 1 MiB each (a failure is the test's).
inline SnapshotStore TwoRankSnapshotStore() {
  absl::StatusOr<SnapshotStore> store = SnapshotStore::Create(2, 1 << 20);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

// The step of the one snapshot in a --snapshot-dir-every copy (its first record, after the file's
// 8 bytes of magic; -1: no such file, or not whole).
inline int64_t CopiedStep(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8 + snapshot::kHeaderBytes) return -1;
  absl::StatusOr<snapshot::SlotHeader> h = snapshot::DecodeHeader(bytes.substr(8, snapshot::kHeaderBytes), 1 << 30);
  return h.ok() ? h->step : -1;
}

}  // namespace dtrun::testing
