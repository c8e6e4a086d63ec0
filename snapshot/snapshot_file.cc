#include "snapshot/snapshot_file.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/format_bytes.h"
#include "base/unique_fd.h"

namespace dtrun::snapshot {
namespace {

constexpr char kFileMagic[8] = {'D', 'T', 'S', 'N', 'A', 'P', 'F', '1'};

absl::Status Write(int fd, const char* data, size_t n) {
  if (WriteAll(fd, data, n)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("cannot write a snapshot file: ", strerror(errno)));
}

// Reads exactly `n` bytes at `offset` (short reads continued).
absl::Status ReadAt(int fd, char* out, uint64_t n, uint64_t offset) {
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1 << 30));
    const ssize_t got = ::pread(fd, out, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::DataLossError(absl::StrCat("cannot read the snapshot file: ", strerror(errno)));
    if (got == 0) return absl::DataLossError("the snapshot file is cut short");
    out += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

// Places one record (its header already read, under the job it is committed as) as a writer
// would, read straight into the slot and committed only once its checksum holds.
absl::Status Place(int fd, uint64_t offset, const SlotHeader& header, MappedRegion& region) {
  bool read = false;
  absl::Status st = PlaceSnapshot(region, header, [&](char* into) {
    DT_RETURN_IF_ERROR(ReadAt(fd, into, header.payload_bytes, offset));
    read = true;
    return absl::OkStatus();
  });
  if (read && !st.ok()) {  // read whole, so the checksum failed
    return absl::DataLossError(absl::StrCat("the snapshot of step ", header.step, " fails its checksum: corrupted on disk"));
  }
  return st;
}

// The size of a regular file that starts with the magic.
absl::StatusOr<uint64_t> CheckedFileSize(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return absl::DataLossError("not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char magic[sizeof(kFileMagic)];
  if (size < sizeof(magic) || !ReadAt(fd, magic, sizeof(magic), 0).ok() ||
      std::memcmp(magic, kFileMagic, sizeof(magic)) != 0) {
    return absl::DataLossError("not a dtrun snapshot file");
  }
  return size;
}

bool SameSnapshot(const absl::StatusOr<SlotHeader>& now, const SlotHeader& then) {
  return now.ok() && now->job == then.job && now->step == then.step && now->payload_hash == then.payload_hash &&
         now->payload_bytes == then.payload_bytes;
}

}  // namespace

absl::StatusOr<std::vector<SlotHeader>> WriteSnapshotFile(const MappedRegion& region, uint64_t job, int fd,
                                                          Slots which) {
  std::vector<std::pair<int, SlotHeader>> held;  // (slot, header)
  for (int s = 0; s < kSlots; ++s) {
    absl::StatusOr<SlotHeader> h = region.Header(s);
    if (h.ok() && h->job == job && region.Verify(s, *h).ok()) held.push_back({s, *h});
  }
  std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.second.step < b.second.step; });
  // A region whose rank changed hands between rounds keeps only the newest rank's snapshots.
  if (!held.empty()) {
    const SlotHeader newest = held.back().second;
    held.erase(std::remove_if(held.begin(), held.end(),
                              [&](const auto& h) {
                                return h.second.rank != newest.rank || h.second.world_size != newest.world_size;
                              }),
               held.end());
  }
  if (which == Slots::kNewest && held.size() > 1) held.erase(held.begin(), held.end() - 1);
  std::vector<SlotHeader> written;
  if (held.empty()) return written;
  DT_RETURN_IF_ERROR(Write(fd, kFileMagic, sizeof(kFileMagic)));
  for (const auto& [slot, header] : held) {
    const std::string bytes = EncodeHeader(header);
    DT_RETURN_IF_ERROR(Write(fd, bytes.data(), bytes.size()));
    DT_RETURN_IF_ERROR(Write(fd, region.Payload(slot), header.payload_bytes));
    // A writer invalidates a slot's header before it touches the payload and commits a new one
    // after: the same header now means the bytes written were the snapshot checked above.
    if (!SameSnapshot(region.Header(slot), header)) {
      return absl::AbortedError(absl::StrCat("the snapshot of step ", header.step, " was rewritten while it was copied"));
    }
    written.push_back(header);
  }
  return written;
}

absl::StatusOr<std::vector<SlotHeader>> ReadSnapshotFile(int fd, uint64_t job, int64_t rank, int64_t world_size,
                                                         MappedRegion& region) {
  DT_ASSIGN_OR_RETURN(const uint64_t size, CheckedFileSize(fd));
  std::vector<SlotHeader> placed;
  uint64_t offset = sizeof(kFileMagic);
  for (int record = 0; offset < size; ++record) {
    if (record == kSlots) return absl::DataLossError(absl::StrCat("more than ", kSlots, " snapshots in one file"));
    if (size - offset < kHeaderBytes) return absl::DataLossError("the snapshot file is cut short");
    std::string bytes(kHeaderBytes, '\0');
    DT_RETURN_IF_ERROR(ReadAt(fd, bytes.data(), bytes.size(), offset));
    offset += kHeaderBytes;
    DT_ASSIGN_OR_RETURN(SlotHeader header, DecodeHeader(bytes, std::numeric_limits<uint64_t>::max()));
    if (header.payload_bytes > size - offset) return absl::DataLossError("the snapshot file is cut short");
    if (header.payload_bytes > region.layout().PayloadCapacity()) {
      return absl::ResourceExhaustedError(absl::StrCat("the snapshot of step ", header.step, " is ",
                                                       FormatBytes(header.payload_bytes), ", more than a slot of ",
                                                       FormatBytes(region.layout().PayloadCapacity()),
                                                       "; raise dtrun --snapshot-memory"));
    }
    if (header.rank == rank && header.world_size == world_size) {
      header.job = job;  // this run's now: the checksum covers the payload only
      DT_RETURN_IF_ERROR(Place(fd, offset, header, region));
      placed.push_back(header);
    }
    offset += header.payload_bytes;
  }
  return placed;
}

absl::StatusOr<uint64_t> SnapshotFileJob(int fd) {
  DT_ASSIGN_OR_RETURN(const uint64_t size, CheckedFileSize(fd));
  if (size - sizeof(kFileMagic) < kHeaderBytes) return absl::DataLossError("the snapshot file is cut short");
  std::string bytes(kHeaderBytes, '\0');
  DT_RETURN_IF_ERROR(ReadAt(fd, bytes.data(), bytes.size(), sizeof(kFileMagic)));
  DT_ASSIGN_OR_RETURN(SlotHeader header, DecodeHeader(bytes, std::numeric_limits<uint64_t>::max()));
  return header.job;
}

}  // namespace dtrun::snapshot
