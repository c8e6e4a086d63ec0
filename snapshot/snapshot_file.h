// A region's snapshots kept in a file, past the life of the agent that held them (dtrun
// --snapshot-dir): a job stopped (preempted, interrupted, out of restarts) starts its next run
// from the newest in-memory state instead of its last disk checkpoint.
//
// File layout: 8 bytes of magic, then one or two records, oldest first, each the slot's 4 KiB
// header (EncodeHeader, with its own checksum) and its payload. Byte order is the machine's, as in
// the region: a file is read back by the same kind of machine.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "snapshot/snapshot_region.h"

namespace dtrun::snapshot {

enum class Slots { kBoth, kNewest };

// Writes the complete snapshots of the region's newest (job, rank, world size) to `fd` (both, or
// only the newest), each checked against its checksum first (a damaged slot is left out). A worker
// may be writing its next snapshot meanwhile: a slot whose header changed by the time its payload
// is written out was being rewritten, and the file is refused (Aborted) rather than torn. Returns
// the headers written, oldest first; none when the region holds no snapshot of `job`. Other errors
// name the write that failed.
absl::StatusOr<std::vector<SlotHeader>> WriteSnapshotFile(const MappedRegion& region, uint64_t job, int fd,
                                                          Slots which = Slots::kBoth);

// Reads a file WriteSnapshotFile wrote into `region`'s slots, as a writer fills them; a record is
// committed only once its payload matches its checksum, and under `job` (the run now) rather than
// the job that wrote it. Only records of `rank` in a world of `world_size` are taken. Memory grows
// with the bytes read, never beyond a slot. Returns the headers placed, oldest first. DataLoss or
// ResourceExhausted name what is wrong (not such a file, cut short, too large for the slot, a bad
// checksum); a record placed before the error stays.
absl::StatusOr<std::vector<SlotHeader>> ReadSnapshotFile(int fd, uint64_t job, int64_t rank, int64_t world_size,
                                                         MappedRegion& region);

// The job that wrote the file (its first record's). DataLoss if it is not such a file.
absl::StatusOr<uint64_t> SnapshotFileJob(int fd);

}  // namespace dtrun::snapshot
