// In-memory training snapshots (docs/DESIGN.md, "Snapshots"). The agent owns one memfd per local
// rank, sized to the memory cap and sealed against resizing, and hands it to every worker of that
// local rank in turn; so a snapshot outlives the worker that wrote it, and nothing outlives dtrun.
//
// Region layout: two slots of equal size, each a 4 KiB header followed by the payload:
//   [slot 0: header | payload ...][slot 1: header | payload ...]
// A writer invalidates the slot it is about to fill (the one not holding the newest complete
// snapshot), writes the payload, then the header with its magic last. A crash mid-write leaves
// the other slot whole. The header names the job, rank, world size and step, and carries the
// payload's checksum (XXH3-64) and its own; the agent reads headers only (status, event log),
// the worker that restores also verifies the payload.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace dtrun::snapshot {

inline constexpr int kSlots = 2;
inline constexpr uint64_t kHeaderBytes = 4096;
// The smallest region worth making: a header and one page of payload per slot.
inline constexpr uint64_t kMinRegionBytes = kSlots * 2 * kHeaderBytes;

struct SlotHeader {
  uint64_t job = 0;          // JobHash(run id)
  int64_t rank = 0;          // global rank that wrote it
  int64_t world_size = 0;
  int64_t step = 0;          // optimizer steps taken when the state was captured
  int64_t attempt = 0;       // the restart count of the attempt that wrote it
  uint64_t payload_bytes = 0;
  uint64_t payload_hash = 0; // PayloadHash of the payload
  int64_t unix_ms = 0;       // when it was completed
};

struct Layout {
  uint64_t region_bytes = 0;
  uint64_t slot_bytes = 0;  // header + payload capacity, a multiple of 4 KiB
  uint64_t SlotOffset(int slot) const { return static_cast<uint64_t>(slot) * slot_bytes; }
  uint64_t PayloadOffset(int slot) const { return SlotOffset(slot) + kHeaderBytes; }
  uint64_t PayloadCapacity() const { return slot_bytes - kHeaderBytes; }
};
// The layout of a region of `region_bytes` (>= kMinRegionBytes).
Layout LayoutOf(uint64_t region_bytes);

uint64_t JobHash(absl::string_view run_id);
uint64_t PayloadHash(const void* data, size_t n);
// The file of the libxxhash this process hashes with, for the workers' Python module
// (python/dtrun/_snapshots.py), which loads it by name; "" when linked statically.
std::string XxhashLibraryFile();

// The kHeaderBytes of a complete slot header.
std::string EncodeHeader(const SlotHeader& header);
// Reads a slot header. NotFound: the slot is empty or being written. DataLoss names what is wrong
// (torn or corrupt header, a payload size beyond `payload_capacity`).
absl::StatusOr<SlotHeader> DecodeHeader(absl::string_view bytes, uint64_t payload_capacity);

// Agent side: a memfd of `bytes` (not yet backed by memory; pages are taken as a worker writes
// them), sealed against growing and shrinking, close-on-exec (the spawner clears that flag for
// the worker it hands the fd to). ResourceExhausted names the cause.
absl::StatusOr<UniqueFd> CreateRegion(uint64_t bytes, const std::string& name);
// The headers of both slots, read with pread (no mapping). For a region that is not one
// (a wrong size), every entry is an error.
std::vector<absl::StatusOr<SlotHeader>> ReadHeaders(int fd);

// The newest complete snapshot among `slots` matching job/rank/world, if any.
std::optional<SlotHeader> Newest(const std::vector<absl::StatusOr<SlotHeader>>& slots);

// Worker side: the region mapped read-write.
class MappedRegion {
 public:
  // Maps the region behind `fd` (the fd stays the caller's). InvalidArgument if it is not one.
  static absl::StatusOr<MappedRegion> Map(int fd);
  MappedRegion(MappedRegion&& other) noexcept;
  MappedRegion& operator=(MappedRegion&& other) noexcept;
  ~MappedRegion();

  const Layout& layout() const { return layout_; }
  absl::StatusOr<SlotHeader> Header(int slot) const;
  // The slot's payload area (PayloadCapacity bytes).
  char* Payload(int slot) { return base_ + layout_.PayloadOffset(slot); }
  const char* Payload(int slot) const { return base_ + layout_.PayloadOffset(slot); }
  // Checks the payload against the header's checksum. DataLoss names the slot and step.
  absl::Status Verify(int slot, const SlotHeader& header) const;
  // Takes memory for the first `bytes` of the slot's payload now, so that a full memory shows as
  // ResourceExhausted here instead of SIGBUS in the middle of a write.
  absl::Status Reserve(int slot, uint64_t bytes);
  // Marks the slot empty (before it is written, or when its state is abandoned).
  void Invalidate(int slot);
  // Completes the slot: its payload is in place; the header goes in, magic last.
  void Commit(int slot, const SlotHeader& header);

 private:
  MappedRegion(int fd, char* base, Layout layout) : fd_(fd), base_(base), layout_(layout) {}
  int fd_ = -1;
  char* base_ = nullptr;
  Layout layout_;
  uint64_t populated_[kSlots] = {};  // bytes of each slot's payload mapped and backed
};

// Which slot a writer of `step` fills next: the one already holding `step` (a checkpoint right
// after a snapshot of the same step: two slots of one step could hold different positions), else
// an empty or damaged one, else the one holding the older step.
int SlotToWrite(const std::vector<absl::StatusOr<SlotHeader>>& slots, int64_t step);

// Writes `header`'s snapshot into `region` as a worker writes one, for a copy made elsewhere (a
// buddy's, a file's): the slot SlotToWrite picks is emptied, `fill` puts header.payload_bytes of
// payload at the pointer it is given, and the slot is committed only if they match the header's
// checksum. ResourceExhausted: larger than a slot; DataLoss (from Verify): the checksum failed and
// the slot stays empty; else what `fill` returned.
absl::Status PlaceSnapshot(MappedRegion& region, const SlotHeader& header,
                           const std::function<absl::Status(char* payload)>& fill);

}  // namespace dtrun::snapshot
