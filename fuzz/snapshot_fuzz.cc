// libFuzzer: a snapshot slot's header and payload table come from a worker's memory, so they are
// untrusted. Input is taken as a slot header (decoded against a small payload capacity) and as a
// payload whose table is decoded; every record accepted must lie inside the payload.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "snapshot/payload_toc.h"
#include "snapshot/snapshot_region.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
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
