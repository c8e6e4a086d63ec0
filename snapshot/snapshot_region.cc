#include "snapshot/snapshot_region.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "xxhash.h"

namespace dtrun::snapshot {
namespace {

constexpr char kMagic[8] = {'D', 'T', 'S', 'N', 'A', 'P', '0', '1'};
constexpr uint32_t kVersion = 1;

// The header's fixed part, little-endian as this machine writes it (a region never leaves it).
struct Wire {
  char magic[8];
  uint32_t version;
  uint32_t wire_bytes;
  uint64_t job;
  int64_t rank, world_size, step, attempt;
  uint64_t payload_bytes, payload_hash;
  int64_t unix_ms;
  uint64_t header_hash;  // XXH3 of everything above, magic excluded (written last)
};
static_assert(sizeof(Wire) < kHeaderBytes);

uint64_t WireHash(const Wire& w) {
  return XXH3_64bits(reinterpret_cast<const char*>(&w) + sizeof(w.magic),
                     offsetof(Wire, header_hash) - sizeof(w.magic));
}

constexpr uint64_t kPage = 4096;

}  // namespace

Layout LayoutOf(uint64_t region_bytes) {
  Layout l;
  l.region_bytes = region_bytes;
  l.slot_bytes = region_bytes / kSlots / kPage * kPage;
  return l;
}

uint64_t JobHash(absl::string_view run_id) { return XXH3_64bits(run_id.data(), run_id.size()); }

uint64_t PayloadHash(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string EncodeHeader(const SlotHeader& h) {
  Wire w{};
  std::memcpy(w.magic, kMagic, sizeof(kMagic));
  w.version = kVersion;
  w.wire_bytes = sizeof(Wire);
  w.job = h.job;
  w.rank = h.rank;
  w.world_size = h.world_size;
  w.step = h.step;
  w.attempt = h.attempt;
  w.payload_bytes = h.payload_bytes;
  w.payload_hash = h.payload_hash;
  w.unix_ms = h.unix_ms;
  w.header_hash = WireHash(w);
  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), &w, sizeof(w));
  return out;
}

std::string XxhashLibraryFile() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&XXH3_64bits), &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string file = info.dli_fname;
  return file.find("libxxhash") != std::string::npos ? file : "";
}

absl::StatusOr<SlotHeader> DecodeHeader(absl::string_view bytes, uint64_t payload_capacity) {
  if (bytes.size() < sizeof(Wire)) return absl::DataLossError("snapshot header cut short");
  Wire w;
  std::memcpy(&w, bytes.data(), sizeof(w));
  static const char kZero[8] = {};
  if (std::memcmp(w.magic, kZero, sizeof(kZero)) == 0) return absl::NotFoundError("empty snapshot slot");
  if (std::memcmp(w.magic, kMagic, sizeof(kMagic)) != 0) return absl::DataLossError("snapshot header has no magic");
  if (w.version != kVersion || w.wire_bytes != sizeof(Wire)) {
    return absl::DataLossError(absl::StrCat("snapshot header version ", w.version, " is not ", kVersion));
  }
  if (WireHash(w) != w.header_hash) return absl::DataLossError("snapshot header checksum mismatch (torn or corrupt)");
  if (w.payload_bytes > payload_capacity) {
    return absl::DataLossError(
        absl::StrCat("snapshot claims ", w.payload_bytes, " bytes; its slot holds ", payload_capacity));
  }
  if (w.step < 0 || w.rank < 0 || w.world_size <= 0 || w.rank >= w.world_size) {
    return absl::DataLossError(absl::StrCat("snapshot header out of range (step ", w.step, ", rank ", w.rank,
                                            " of ", w.world_size, ")"));
  }
  return SlotHeader{w.job, w.rank, w.world_size, w.step, w.attempt, w.payload_bytes, w.payload_hash, w.unix_ms};
}

absl::StatusOr<UniqueFd> CreateRegion(uint64_t bytes, const std::string& name) {
  if (bytes < kMinRegionBytes) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot region of ", bytes, " bytes is below the minimum ",
                                                   kMinRegionBytes));
  }
  UniqueFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot create snapshot memory (memfd_create): ",
                                                     strerror(errno)));
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot size snapshot memory to ", bytes, " bytes: ",
                                                     strerror(errno)));
  }
  return fd;
}

namespace {

absl::StatusOr<uint64_t> RegionSize(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::InvalidArgumentError(absl::StrCat("snapshot fd: ", strerror(errno)));
  // Only a sealed memfd of a usable size is a region: a plain file or a resizable one is not.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (!S_ISREG(st.st_mode) || seals < 0 || (seals & (F_SEAL_GROW | F_SEAL_SHRINK)) != (F_SEAL_GROW | F_SEAL_SHRINK) ||
      static_cast<uint64_t>(st.st_size) < kMinRegionBytes) {
    return absl::InvalidArgumentError("the snapshot fd is not a sealed snapshot region");
  }
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

std::vector<absl::StatusOr<SlotHeader>> ReadHeaders(int fd) {
  std::vector<absl::StatusOr<SlotHeader>> out;
  absl::StatusOr<uint64_t> size = RegionSize(fd);
  const Layout layout = LayoutOf(size.ok() ? *size : 0);
  for (int s = 0; s < kSlots; ++s) {
    if (!size.ok()) {
      out.push_back(size.status());
      continue;
    }
    std::string bytes(sizeof(Wire), '\0');
    ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(layout.SlotOffset(s)));
    if (n != static_cast<ssize_t>(bytes.size())) {
      out.push_back(absl::DataLossError("snapshot header unreadable"));
      continue;
    }
    out.push_back(DecodeHeader(bytes, layout.PayloadCapacity()));
  }
  return out;
}

std::optional<SlotHeader> Newest(const std::vector<absl::StatusOr<SlotHeader>>& slots) {
  std::optional<SlotHeader> best;
  for (const auto& s : slots) {
    if (s.ok() && (!best || s->step > best->step)) best = *s;
  }
  return best;
}

int SlotToWrite(const std::vector<absl::StatusOr<SlotHeader>>& slots, int64_t step) {
  for (int s = 0; s < static_cast<int>(slots.size()); ++s) {
    if (slots[s].ok() && slots[s]->step == step) return s;
  }
  int pick = 0;
  for (int s = 0; s < static_cast<int>(slots.size()); ++s) {
    if (!slots[s].ok()) return s;
    if (slots[s]->step < slots[pick]->step) pick = s;
  }
  return pick;
}

absl::StatusOr<MappedRegion> MappedRegion::Map(int fd) {
  DT_ASSIGN_OR_RETURN(uint64_t size, RegionSize(fd));
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map snapshot memory: ", strerror(errno)));
  }
  return MappedRegion(fd, static_cast<char*>(base), LayoutOf(size));
}

MappedRegion::MappedRegion(MappedRegion&& other) noexcept { *this = std::move(other); }

MappedRegion& MappedRegion::operator=(MappedRegion&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, layout_.region_bytes);
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    layout_ = other.layout_;
    std::copy(std::begin(other.populated_), std::end(other.populated_), std::begin(populated_));
  }
  return *this;
}

MappedRegion::~MappedRegion() {
  if (base_ != nullptr) ::munmap(base_, layout_.region_bytes);
}

absl::StatusOr<SlotHeader> MappedRegion::Header(int slot) const {
  return DecodeHeader(absl::string_view(base_ + layout_.SlotOffset(slot), sizeof(Wire)), layout_.PayloadCapacity());
}

absl::Status MappedRegion::Verify(int slot, const SlotHeader& header) const {
  if (PayloadHash(Payload(slot), header.payload_bytes) != header.payload_hash) {
    return absl::DataLossError(absl::StrCat("snapshot of step ", header.step, " (slot ", slot,
                                            ") fails its checksum: corrupted in memory"));
  }
  return absl::OkStatus();
}

absl::Status MappedRegion::Reserve(int slot, uint64_t bytes) {
  if (bytes > layout_.PayloadCapacity()) {
    return absl::ResourceExhaustedError(absl::StrCat("the training state is ", bytes / 1000000,
                                                     " MB, a snapshot slot holds ",
                                                     layout_.PayloadCapacity() / 1000000,
                                                     " MB; raise dtrun --snapshot-memory"));
  }
  if (bytes == 0) return absl::OkStatus();
  if (bytes <= populated_[slot]) return absl::OkStatus();
  int rc = ::fallocate(fd_, 0, static_cast<off_t>(layout_.PayloadOffset(slot)), static_cast<off_t>(bytes));
  if (rc != 0 && errno != EOPNOTSUPP) {
    return absl::ResourceExhaustedError(absl::StrCat("no memory for a ", bytes / 1000000, " MB snapshot: ",
                                                     strerror(errno), "; lower dtrun --snapshot-memory or free memory"));
  }
  // Page tables for the whole range in one call: faulting 4 KiB at a time made a fresh worker's
  // first snapshots 3x slower. Kernels before 5.14 say EINVAL and fault as before.
  const uint64_t length = (bytes + 4095) / 4096 * 4096;
#ifdef MADV_POPULATE_WRITE
  ::madvise(base_ + layout_.PayloadOffset(slot), length, MADV_POPULATE_WRITE);
#endif
  populated_[slot] = length;
  return absl::OkStatus();
}

void MappedRegion::Invalidate(int slot) {
  char* h = base_ + layout_.SlotOffset(slot);
  std::atomic_thread_fence(std::memory_order_release);
  std::memset(h, 0, sizeof(Wire));
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void MappedRegion::Commit(int slot, const SlotHeader& header) {
  const std::string bytes = EncodeHeader(header);
  char* h = base_ + layout_.SlotOffset(slot);
  // Everything but the magic first, then the magic: a reader sees an empty slot or a whole one.
  std::memcpy(h + sizeof(kMagic), bytes.data() + sizeof(kMagic), sizeof(Wire) - sizeof(kMagic));
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h, bytes.data(), sizeof(kMagic));
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

absl::Status PlaceSnapshot(MappedRegion& region, const SlotHeader& header,
                           const std::function<absl::Status(char* payload)>& fill) {
  std::vector<absl::StatusOr<SlotHeader>> slots;
  for (int s = 0; s < kSlots; ++s) slots.push_back(region.Header(s));
  const int slot = SlotToWrite(slots, header.step);
  region.Invalidate(slot);
  DT_RETURN_IF_ERROR(region.Reserve(slot, header.payload_bytes));
  DT_RETURN_IF_ERROR(fill(region.Payload(slot)));
  if (absl::Status st = region.Verify(slot, header); !st.ok()) {
    region.Invalidate(slot);
    return st;
  }
  region.Commit(slot, header);
  return absl::OkStatus();
}

}  // namespace dtrun::snapshot
