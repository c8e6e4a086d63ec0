// libFuzzer: a snapshot slot's header and payload table come from a worker's memory, and a kept
// snapshot file (--snapshot-dir) from a disk, so they are untrusted. Input is taken as a slot
// header (decoded against a small payload capacity), as a payload whose table is decoded (every
// record accepted must lie inside the payload), and as a snapshot file read into a small region
// (every slot it leaves complete must pass its checksum).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <sys/mman.h>
#include <unistd.h>

#include "snapshot/payload_toc.h"
#include "snapshot/snapshot_file.h"
#include "snapshot/snapshot_region.h"

namespace {

// The input as a kept snapshot file of rank 1 of 2, read into a region of 64 KiB.
void ReadAsSnapshotFile(const uint8_t* data, size_t size) {
  using namespace dtrun::snapshot;
  static const int file = ::memfd_create("fuzz-file", MFD_CLOEXEC);
  static dtrun::UniqueFd region_fd = std::move(*CreateRegion(64 << 10, "fuzz-region"));
  static MappedRegion region = std::move(*MappedRegion::Map(region_fd.get()));
  if (file < 0 || ::ftruncate(file, 0) != 0 || ::pwrite(file, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  for (int s = 0; s < kSlots; ++s) region.Invalidate(s);
  (void)SnapshotFileJob(file);  // what a --snapshot-dir survey reads of every file
  (void)ReadSnapshotFile(file, JobHash("fuzz"), 1, 2, region);
  for (int s = 0; s < kSlots; ++s) {
    absl::StatusOr<SlotHeader> h = region.Header(s);
    if (h.ok() && (h->job != JobHash("fuzz") || h->rank != 1 || h->world_size != 2 || !region.Verify(s, *h).ok())) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ReadAsSnapshotFile(data, size);
  using namespace dtrun::snapshot;
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<SlotHeader> h = DecodeHeader(input, 1 << 16);
  if (h.ok() && (h->payload_bytes > (1 << 16) || h->step < 0 || h->rank >= h->world_size)) std::abort();
  absl::StatusOr<std::vector<TensorRecord>> toc = DecodeToc(input);
  if (toc.ok()) {
    for (const TensorRecord& r : *toc) {
      if (r.offset > size || r.nbytes > size - r.offset) std::abort();
      if (SpanBytes(r.sizes, r.strides, r.item_bytes) != r.nbytes) std::abort();
    }
    // A valid table re-encodes to the same bytes.
    const std::string again = EncodeToc(*toc);
    if (input.substr(0, again.size()) != again) std::abort();
  }
  return 0;
}
