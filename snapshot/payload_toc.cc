#include "snapshot/payload_toc.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace dtrun::snapshot {
namespace {

constexpr uint64_t kAlign = 64;
constexpr char kTocMagic[8] = {'D', 'T', 'S', 'T', 'O', 'C', '0', '1'};

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void Put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
void PutValue(std::string& out, T v) {
  Put(out, &v, sizeof(v));
}

// Reads fixed-size values off the front of a view, failing instead of reading past its end.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  template <class T>
  bool Read(T& v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(&v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool ReadBytes(size_t n, std::string& out) {
    if (in_.size() < n) return false;
    out.assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  size_t consumed(size_t total) const { return total - in_.size(); }

 private:
  absl::string_view in_;
};

uint64_t TocBytes(const std::vector<TensorRecord>& records) {
  uint64_t n = sizeof(kTocMagic) + sizeof(uint64_t);
  for (const TensorRecord& r : records) {
    n += 4 * sizeof(int32_t) + 2 * sizeof(uint64_t) + 2 * sizeof(int64_t) * r.sizes.size() + r.name.size();
  }
  return n;
}

}  // namespace

std::optional<uint64_t> SpanBytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                  int32_t item_bytes) {
  if (sizes.size() != strides.size() || item_bytes <= 0) return std::nullopt;
  unsigned __int128 last = 0;  // the index of the last element
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0) return std::nullopt;
    if (sizes[i] == 0) return 0;
    last += static_cast<unsigned __int128>(sizes[i] - 1) * static_cast<uint64_t>(strides[i]);
    if (last > (uint64_t{1} << 62)) return std::nullopt;
  }
  unsigned __int128 bytes = (last + 1) * static_cast<uint64_t>(item_bytes);
  if (bytes > (uint64_t{1} << 62)) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

uint64_t LayOut(std::vector<TensorRecord>& records) {
  uint64_t at = AlignUp(TocBytes(records));
  for (TensorRecord& r : records) {
    r.offset = at;
    at = AlignUp(at + r.nbytes);
  }
  return at;
}

std::string EncodeToc(const std::vector<TensorRecord>& records) {
  std::string out;
  out.reserve(TocBytes(records));
  Put(out, kTocMagic, sizeof(kTocMagic));
  PutValue<uint64_t>(out, records.size());
  for (const TensorRecord& r : records) {
    PutValue<int32_t>(out, static_cast<int32_t>(r.name.size()));
    PutValue<int32_t>(out, r.dtype);
    PutValue<int32_t>(out, r.item_bytes);
    PutValue<int32_t>(out, static_cast<int32_t>(r.sizes.size()));
    PutValue<uint64_t>(out, r.offset);
    PutValue<uint64_t>(out, r.nbytes);
    Put(out, r.sizes.data(), r.sizes.size() * sizeof(int64_t));
    Put(out, r.strides.data(), r.strides.size() * sizeof(int64_t));
    Put(out, r.name.data(), r.name.size());
  }
  return out;
}

absl::StatusOr<std::vector<TensorRecord>> DecodeToc(absl::string_view payload) {
  Reader in(payload);
  char magic[sizeof(kTocMagic)];
  uint64_t count = 0;
  if (!in.Read(magic) || std::memcmp(magic, kTocMagic, sizeof(magic)) != 0 || !in.Read(count)) {
    return absl::DataLossError("snapshot payload has no table of contents");
  }
  // Each record takes at least 32 bytes of the table: a count beyond that is a lie.
  if (count > kMaxTensors || count > payload.size() / 32) {
    return absl::DataLossError(absl::StrCat("snapshot payload claims ", count, " tensors"));
  }
  std::vector<TensorRecord> records(count);
  for (uint64_t i = 0; i < count; ++i) {
    TensorRecord& r = records[i];
    int32_t name_bytes = 0, dims = 0;
    if (!in.Read(name_bytes) || !in.Read(r.dtype) || !in.Read(r.item_bytes) || !in.Read(dims) ||
        !in.Read(r.offset) || !in.Read(r.nbytes)) {
      return absl::DataLossError(absl::StrCat("snapshot table cut short at tensor ", i));
    }
    if (name_bytes <= 0 || static_cast<size_t>(name_bytes) > kMaxNameBytes || dims < 0 || dims > kMaxDims ||
        r.item_bytes <= 0 || r.item_bytes > 16) {
      return absl::DataLossError(absl::StrCat("snapshot tensor ", i, " has a bad name length, rank or dtype"));
    }
    r.sizes.resize(dims);
    r.strides.resize(dims);
    for (int64_t& s : r.sizes) {
      if (!in.Read(s)) return absl::DataLossError(absl::StrCat("snapshot table cut short at tensor ", i));
    }
    for (int64_t& s : r.strides) {
      if (!in.Read(s)) return absl::DataLossError(absl::StrCat("snapshot table cut short at tensor ", i));
    }
    if (!in.ReadBytes(static_cast<size_t>(name_bytes), r.name)) {
      return absl::DataLossError(absl::StrCat("snapshot table cut short at tensor ", i));
    }
    std::optional<uint64_t> span = SpanBytes(r.sizes, r.strides, r.item_bytes);
    if (!span || *span != r.nbytes || r.offset % kAlign != 0 || r.offset > payload.size() ||
        r.nbytes > payload.size() - r.offset) {
      return absl::DataLossError(absl::StrCat("snapshot tensor ", r.name, " lies outside the payload"));
    }
  }
  const uint64_t table_end = in.consumed(payload.size());
  for (const TensorRecord& r : records) {
    if (r.offset < table_end) {
      return absl::DataLossError(absl::StrCat("snapshot tensor ", r.name, " overlaps the table"));
    }
  }
  return records;
}

struct PayloadHasher::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

PayloadHasher::PayloadHasher() : state_(std::make_unique<State>()) { XXH3_64bits_reset(state_->s); }
PayloadHasher::~PayloadHasher() = default;
void PayloadHasher::Update(const void* data, size_t n) { XXH3_64bits_update(state_->s, data, n); }
uint64_t PayloadHasher::Digest() const { return XXH3_64bits_digest(state_->s); }

}  // namespace dtrun::snapshot
