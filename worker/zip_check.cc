#include "worker/zip_check.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrun::worker {
namespace {

constexpr uint32_t kEndOfCentralDir = 0x06054b50;
constexpr uint32_t kZip64EndOfCentralDir = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kCentralFile = 0x02014b50;
constexpr uint32_t kLocalFile = 0x04034b50;

// Little-endian reads that never go past `bytes`.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : b_(bytes) {}
  bool Has(uint64_t at, uint64_t n) const { return at <= b_.size() && n <= b_.size() - at; }
  uint64_t Le(uint64_t at, int n) const {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b_[at + i]);
    return v;
  }
  std::string_view Slice(uint64_t at, uint64_t n) const { return b_.substr(at, n); }
  uint64_t size() const { return b_.size(); }

 private:
  std::string_view b_;
};

absl::Status Bad(const std::string& what) { return absl::DataLossError(absl::StrCat("not a whole checkpoint: ", what)); }

uint32_t Crc32(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!data.empty()) {
    const uInt n = static_cast<uInt>(std::min<size_t>(data.size(), 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data()), n);
    data.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

// CRC-32 of a raw-deflate stream's output, inflated in small pieces (no allocation the size of a
// claim); false if the stream is corrupt or does not inflate to exactly `size` bytes.
bool InflatedCrc(std::string_view deflated, uint64_t size, uint32_t* crc_out) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return false;
  unsigned char out[1 << 16];
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t produced = 0;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(deflated.data()));
  z.avail_in = static_cast<uInt>(std::min<size_t>(deflated.size(), 1u << 30));
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = out;
    z.avail_out = sizeof(out);
    rc = inflate(&z, Z_NO_FLUSH);
    const uint64_t n = sizeof(out) - z.avail_out;
    produced += n;
    if (produced > size) break;
    crc = crc32(crc, out, static_cast<uInt>(n));
    if (rc == Z_OK && n == 0 && z.avail_in == 0) break;  // input ended before the stream did
  }
  inflateEnd(&z);
  *crc_out = static_cast<uint32_t>(crc);
  return rc == Z_STREAM_END && produced == size;
}

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

absl::Status FindDirectory(const Reader& r, Directory* d) {
  if (r.size() < 22) return Bad("too short for a zip");
  // The end record is in the last 64 KiB + 22 bytes (its comment is at most 64 KiB).
  const uint64_t lowest = r.size() > 65557 ? r.size() - 65557 : 0;
  for (uint64_t at = r.size() - 22 + 1; at-- > lowest;) {
    if (r.Le(at, 4) != kEndOfCentralDir) continue;
    d->entries = r.Le(at + 10, 2);
    d->size = r.Le(at + 12, 4);
    d->offset = r.Le(at + 16, 4);
    if (d->entries == 0xFFFF || d->size == 0xFFFFFFFF || d->offset == 0xFFFFFFFF) {
      // Zip64: a locator 20 bytes before the end record points to the 64-bit end record.
      if (at < 20 || r.Le(at - 20, 4) != kZip64Locator) return Bad("zip64 end record missing");
      const uint64_t rec = r.Le(at - 20 + 8, 8);
      if (!r.Has(rec, 56) || r.Le(rec, 4) != kZip64EndOfCentralDir) return Bad("zip64 end record corrupt");
      d->entries = r.Le(rec + 32, 8);
      d->size = r.Le(rec + 40, 8);
      d->offset = r.Le(rec + 48, 8);
    }
    if (!r.Has(d->offset, d->size)) return Bad("central directory outside the file");
    return absl::OkStatus();
  }
  return Bad("no end of central directory (truncated?)");
}

// The 64-bit values a zip64 extra field carries for the fields that are 0xFFFFFFFF.
void ApplyZip64Extra(const Reader& r, uint64_t extra, uint64_t extra_len, uint64_t* size, uint64_t* csize,
                     uint64_t* local) {
  for (uint64_t at = extra; at + 4 <= extra + extra_len;) {
    const uint64_t id = r.Le(at, 2), len = r.Le(at + 2, 2);
    uint64_t v = at + 4;
    if (id == 0x0001) {
      for (uint64_t* field : {size, csize, local}) {
        if (*field == 0xFFFFFFFF && v + 8 <= at + 4 + len && r.Has(v, 8)) {
          *field = r.Le(v, 8);
          v += 8;
        }
      }
    }
    at += 4 + len;
  }
}

}  // namespace

absl::Status VerifyZipChecksums(std::string_view bytes) {
  Reader r(bytes);
  Directory dir;
  DT_RETURN_IF_ERROR(FindDirectory(r, &dir));
  if (dir.entries == 0) return Bad("an empty zip");
  uint64_t at = dir.offset;
  // Members own distinct bytes, so their data adds up to less than the file. A directory that
  // lists one member's bytes many times would otherwise cost a CRC pass over them for each.
  uint64_t claimed = 0;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    if (!r.Has(at, 46) || r.Le(at, 4) != kCentralFile) return Bad(absl::StrCat("directory entry ", i, " corrupt"));
    const uint64_t method = r.Le(at + 10, 2);
    const uint32_t crc = static_cast<uint32_t>(r.Le(at + 16, 4));
    uint64_t csize = r.Le(at + 20, 4), size = r.Le(at + 24, 4);
    const uint64_t name_len = r.Le(at + 28, 2), extra_len = r.Le(at + 30, 2), comment_len = r.Le(at + 32, 2);
    uint64_t local = r.Le(at + 42, 4);
    if (!r.Has(at + 46, name_len + extra_len + comment_len)) return Bad(absl::StrCat("directory entry ", i, " cut off"));
    const std::string name(r.Slice(at + 46, name_len));
    ApplyZip64Extra(r, at + 46 + name_len, extra_len, &size, &csize, &local);
    if (!r.Has(local, 30) || r.Le(local, 4) != kLocalFile) return Bad(absl::StrCat(name, ": local header corrupt"));
    const uint64_t data = local + 30 + r.Le(local + 26, 2) + r.Le(local + 28, 2);
    if (!r.Has(data, csize)) return Bad(absl::StrCat(name, ": data outside the file (truncated?)"));
    claimed += csize;  // no overflow: both are at most the file's size
    if (claimed > r.size()) return Bad(absl::StrCat(name, ": its data overlaps other members'"));
    uint32_t actual = 0;
    if (method == 0) {  // stored: tensors and pickles
      if (csize != size) return Bad(absl::StrCat(name, ": sizes disagree"));
      actual = Crc32(r.Slice(data, size));
    } else if (method == 8) {  // deflated: TorchScript's code members
      if (!InflatedCrc(r.Slice(data, csize), size, &actual)) return Bad(absl::StrCat(name, ": does not inflate"));
    } else {
      return Bad(absl::StrCat(name, ": unknown compression method ", method));
    }
    if (actual != crc) return Bad(absl::StrCat(name, ": checksum mismatch (corrupt data)"));
    at += 46 + name_len + extra_len + comment_len;
  }
  return absl::OkStatus();
}

}  // namespace dtrun::worker
