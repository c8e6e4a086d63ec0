#include "worker/data/decode.h"

#include <turbojpeg.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/data/stb_decode.h"
#include "worker/data/transforms.h"

namespace dtrun::data {
namespace {

bool LooksLikeJpeg(std::string_view b) {
  return b.size() > 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8;
}

}  // namespace

Decoder::Decoder(int64_t max_pixels) : tj_(tjInitDecompress()), max_pixels_(max_pixels) {}

absl::Status Decoder::CheckBudget(int width, int height) const {
  const int64_t pixels = int64_t{width} * height;
  if (width <= 0 || height <= 0) return absl::DataLossError(absl::StrCat("image claims ", width, "x", height, " pixels"));
  if (pixels > max_pixels_) {
    return absl::ResourceExhaustedError(absl::StrCat("image claims ", width, "x", height, " = ", pixels,
                                                     " pixels, over the decode budget of ", max_pixels_,
                                                     " (--max-image-pixels); not decoded"));
  }
  return absl::OkStatus();
}
absl::Status Decoder::HeaderError() {
  const absl::Status st =
      absl::DataLossError(absl::StrCat("corrupt JPEG header: ", tjGetErrorStr2(static_cast<tjhandle>(tj_))));
  // libjpeg-turbo 2.1 keeps a failed header's state: every later header read on the handle fails
  // too, and one bad file would make its loader thread skip every image after it. A new handle.
  tjDestroy(static_cast<tjhandle>(tj_));
  tj_ = tjInitDecompress();
  return st;
}

absl::StatusOr<Decoder::JpegHeader> Decoder::ReadJpegHeader(std::string_view bytes) {
  JpegHeader h;
  if (tjDecompressHeader3(static_cast<tjhandle>(tj_), reinterpret_cast<const unsigned char*>(bytes.data()),
                          bytes.size(), &h.width, &h.height, &h.subsampling, &h.colorspace) != 0) {
    return HeaderError();
  }
  DT_RETURN_IF_ERROR(CheckBudget(h.width, h.height));
  return h;
}

bool Decoder::JpegHeader::cmyk() const { return colorspace == TJCS_CMYK || colorspace == TJCS_YCCK; }

// The IDCT does less work and the resampler has less to shrink. (libjpeg-turbo has SIMD code for
// these; odd eighths would be slower than decoding at full size.)
Decoder::ScaledJpeg Decoder::ScaleFor(const JpegHeader& header, const Box& need, int min_w, int min_h) {
  int eighths = 8;
  for (int m : {1, 2, 4}) {
    if (need.w * m / 8 >= min_w && need.h * m / 8 >= min_h) {
      eighths = m;
      break;
    }
  }
  const tjscalingfactor factor{eighths, 8};
  const int width = TJSCALED(header.width, factor);
  return ScaledJpeg{eighths, width, TJSCALED(header.height, factor), static_cast<double>(width) / header.width};
}

Decoder::~Decoder() {
  if (tj_) tjDestroy(static_cast<tjhandle>(tj_));
}

absl::StatusOr<ImageInfo> Decoder::Info(std::string_view bytes) {
  if (LooksLikeJpeg(bytes)) {
    DT_ASSIGN_OR_RETURN(JpegHeader header, ReadJpegHeader(bytes));
    const int subsamp = header.subsampling;
    const bool plain_chroma = subsamp == TJSAMP_444 || subsamp == TJSAMP_422 || subsamp == TJSAMP_420 ||
                              subsamp == TJSAMP_440;
    return ImageInfo{header.width, header.height, true, header.colorspace == TJCS_YCbCr && plain_chroma};
  }
  DT_ASSIGN_OR_RETURN(StbSize size, StbReadSize(bytes));
  DT_RETURN_IF_ERROR(CheckBudget(size.width, size.height));
  return ImageInfo{size.width, size.height, false};
}

absl::StatusOr<Image> Decoder::Decode(std::string_view bytes, const Box& need, int min_w, int min_h, double* scale) {
  if (scale) *scale = 1;
  if (!LooksLikeJpeg(bytes)) {
    DT_ASSIGN_OR_RETURN(ImageInfo info, Info(bytes));  // the budget, before stb allocates
    return StbDecodeRgb(bytes, StbSize{info.width, info.height});
  }
  DT_ASSIGN_OR_RETURN(JpegHeader header, ReadJpegHeader(bytes));
  const ScaledJpeg s = ScaleFor(header, need, min_w, min_h);
  tjhandle tj = static_cast<tjhandle>(tj_);
  std::vector<uint8_t> raw(static_cast<size_t>(s.width) * s.height * (header.cmyk() ? 4 : 3));
  const int flags = TJFLAG_FASTDCT | TJFLAG_STOPONWARNING;
  if (tjDecompress2(tj, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), raw.data(), s.width, 0,
                    s.height, header.cmyk() ? TJPF_CMYK : TJPF_RGB, flags) != 0) {
    return absl::DataLossError(absl::StrCat("corrupt or truncated JPEG: ", tjGetErrorStr2(tj)));
  }
  if (header.cmyk()) {
    CmykToRgbInPlace(raw.data(), static_cast<size_t>(s.width) * s.height);
    raw.resize(static_cast<size_t>(s.width) * s.height * 3);
  }
  if (scale) *scale = s.scale;
  return Image{s.width, s.height, std::move(raw)};
}

absl::StatusOr<ImageRegion> Decoder::DecodeForResize(std::string_view bytes, const Box& need, int out_w, int out_h,
                                                     double* scale) {
  *scale = 1;
  if (!LooksLikeJpeg(bytes)) {
    DT_ASSIGN_OR_RETURN(whole_, Decode(bytes, need, out_w, out_h));
    return ImageRegion::Whole(whole_);
  }
  DT_ASSIGN_OR_RETURN(JpegHeader header, ReadJpegHeader(bytes));
  const ScaledJpeg s = ScaleFor(header, need, out_w, out_h);
  *scale = s.scale;
  const Box scaled{need.x * s.scale, need.y * s.scale, need.w * s.scale, need.h * s.scale};
  return DecodeJpegRegion(bytes, s.eighths, header.cmyk(), s.width, s.height,
                          PixelsRead(scaled, s.width, s.height, out_w, out_h), &scratch_);
}

}  // namespace dtrun::data
