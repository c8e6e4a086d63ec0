// Buddy copies as a hostile peer sends them: a header with any fields, then pieces of any sizes.
// CopyAssembler must refuse everything that does not add up, and whatever ReplicaKeeper keeps
// must match its checksum, its declared size and the cap.
#include <cstdint>
#include <cstring>
#include <string>

#include "replica/replica_keeper.h"

namespace {

template <typename T>
T Take(const uint8_t*& data, size_t& size) {
  T v{};
  const size_t n = std::min(sizeof(T), size);
  std::memcpy(&v, data, n);
  data += n;
  size -= n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kJob = 1, kCap = 1 << 16;
  static dtrun::replica::ReplicaKeeper keeper(kJob, kCap, 4);
  dtrun::snapshot::SlotHeader h;
  h.job = Take<uint8_t>(data, size) & 1;  // this job or another
  h.rank = Take<int8_t>(data, size);
  h.world_size = Take<int8_t>(data, size);
  h.step = Take<int16_t>(data, size);
  h.payload_bytes = Take<uint32_t>(data, size) % (2 * kCap);
  const bool honest_hash = Take<uint8_t>(data, size) & 1;
  h.payload_hash = Take<uint64_t>(data, size);
  dtrun::replica::CopyAssembler copy(kJob, kCap);
  std::string sent;
  if (!copy.Begin(h).ok()) return 0;
  while (size > 0) {
    const size_t piece = std::min<size_t>(Take<uint8_t>(data, size), size);
    sent.append(reinterpret_cast<const char*>(data), piece);
    if (!copy.Add(absl::string_view(reinterpret_cast<const char*>(data), piece)).ok()) return 0;
    data += piece;
    size -= piece;
  }
  if (honest_hash) {
    // A peer that computes the checksum of what it sends: only the size can make it fail.
    dtrun::replica::CopyAssembler again(kJob, kCap);
    h.payload_hash = dtrun::snapshot::PayloadHash(sent.data(), sent.size());
    if (!again.Begin(h).ok() || !again.Add(sent).ok()) __builtin_trap();
    copy = std::move(again);
  }
  absl::StatusOr<dtrun::replica::Copy> done = copy.Finish();
  if (!done.ok()) return 0;
  if (done->payload.size() != done->header.payload_bytes || done->payload.size() > kCap ||
      dtrun::snapshot::PayloadHash(done->payload.data(), done->payload.size()) != done->header.payload_hash) {
    __builtin_trap();
  }
  const int64_t rank = done->header.rank, world = done->header.world_size;
  keeper.Keep(std::move(*done));
  for (const dtrun::replica::CopyPtr& c : keeper.Copies(rank, world)) {
    if (c->header.job != kJob || c->payload.size() > kCap) __builtin_trap();
  }
  return 0;
}
