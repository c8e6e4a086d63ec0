#include "worker/data/stb_decode.h"

#include <climits>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace dtrun::data {
namespace {

// stb has no allocator argument; a decode runs on one thread, so its limit is thread-local.
thread_local size_t t_max_alloc = 0;
thread_local size_t t_refused_bytes = 0;

void* BoundedRealloc(void* p, size_t n) {
  if (n > t_max_alloc) {
    t_refused_bytes = n;
    return nullptr;
  }
  return std::realloc(p, n);
}

}  // namespace
}  // namespace dtrun::data

#define STBI_MALLOC(n) ::dtrun::data::BoundedRealloc(nullptr, (n))
#define STBI_REALLOC(p, n) ::dtrun::data::BoundedRealloc((p), (n))
#define STBI_FREE(p) std::free(p)
#define STB_IMAGE_STATIC  // private to this file: no clash with libstb's exported stbi_* symbols
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO
#define STBI_NO_JPEG
#define STBI_NO_TGA
#define STBI_NO_PSD
#define STBI_NO_PIC
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#include <stb_image.h>  // libstb-dev's header (pkg-config stb)
#include "base/status_macros.h"

namespace dtrun::data {
namespace {

// stb takes an int length.
absl::Status CheckLength(std::string_view bytes) {
  if (bytes.size() > size_t{INT_MAX}) {
    return absl::ResourceExhaustedError(absl::StrCat("image file of ", bytes.size(), " bytes is too large to decode"));
  }
  return absl::OkStatus();
}

const stbi_uc* Data(std::string_view bytes) { return reinterpret_cast<const stbi_uc*>(bytes.data()); }

// This stb converts a 16-bit grey PNM to RGB as if it were 8-bit, then reads twice the buffer it
// made (found by decode_fuzz under ASan). Such files are refused rather than decoded.
bool IsSixteenBitPnm(std::string_view bytes) {
  return bytes.size() > 2 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '6') &&
         stbi_is_16_bit_from_memory(Data(bytes), static_cast<int>(bytes.size()));
}

// Reading a header allocates only the GIF reader's own state (about 34 KiB).
constexpr size_t kHeaderAllocLimit = size_t{1} << 20;

// Sets the thread's allocation limit for one stb call.
class AllocLimit {
 public:
  explicit AllocLimit(size_t bytes) {
    t_max_alloc = bytes;
    t_refused_bytes = 0;
  }
  ~AllocLimit() { t_max_alloc = 0; }
  AllocLimit(const AllocLimit&) = delete;
  AllocLimit& operator=(const AllocLimit&) = delete;
  size_t refused_bytes() const { return t_refused_bytes; }
};

// 20 bytes a pixel covers 16-bit RGBA (8) and stb's doubling of the inflate buffer for an
// interlaced PNG; compressed data is gathered in a buffer at most twice the file.
size_t AllocLimitFor(const StbSize& header, size_t file_bytes) {
  return size_t(header.width) * size_t(header.height) * 20 + 2 * file_bytes + kHeaderAllocLimit;
}

}  // namespace

absl::StatusOr<StbSize> StbReadSize(std::string_view bytes) {
  DT_RETURN_IF_ERROR(CheckLength(bytes));
  StbSize size;
  int channels = 0;
  AllocLimit limit(kHeaderAllocLimit);
  if (!stbi_info_from_memory(Data(bytes), static_cast<int>(bytes.size()), &size.width, &size.height, &channels)) {
    return absl::DataLossError("not an image (unknown or corrupt format)");
  }
  return size;
}

absl::StatusOr<Image> StbDecodeRgb(std::string_view bytes, const StbSize& header) {
  DT_RETURN_IF_ERROR(CheckLength(bytes));
  if (IsSixteenBitPnm(bytes)) {
    return absl::DataLossError("16-bit PNM (maxval over 255) is not supported; convert it to PNG");
  }
  const size_t max_alloc = AllocLimitFor(header, bytes.size());
  AllocLimit limit(max_alloc);
  int w = 0, h = 0, channels = 0;
  stbi_uc* px = stbi_load_from_memory(Data(bytes), static_cast<int>(bytes.size()), &w, &h, &channels, 3);
  if (px == nullptr) {
    if (limit.refused_bytes() != 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "image of ", header.width, "x", header.height, " pixels asks for a ", limit.refused_bytes(),
          "-byte buffer, more than that size can need (", max_alloc, "); corrupt or hostile, not decoded"));
    }
    return absl::DataLossError(absl::StrCat("undecodable image: ", stbi_failure_reason()));
  }
  Image img{w, h, std::vector<uint8_t>(px, px + static_cast<size_t>(w) * h * 3)};
  stbi_image_free(px);
  return img;
}

}  // namespace dtrun::data
