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

// The smallest DCT-domain scale (1/8, 1/4, 1/2) that keeps the needed region at least
// min_w × min_h: the IDCT does less work and the resampler has less to shrink. (libjpeg-turbo
// has SIMD code for these; odd eighths would be slower than decoding at full size.)
int ScaleInEighths(const Box& need, int min_w, int min_h) {
  for (int m : {1, 2, 4}) {
    if (need.w * m / 8 >= min_w && need.h * m / 8 >= min_h) return m;
  }
  return 8;
}

// Adobe-style (inverted) CMYK → RGB, as PIL converts it.
void CmykToRgb(const std::vector<uint8_t>& cmyk, int pixels, std::vector<uint8_t>* rgb) {
  rgb->resize(static_cast<size_t>(pixels) * 3);
  for (int i = 0; i < pixels; ++i) {
    const uint8_t* p = &cmyk[static_cast<size_t>(i) * 4];
    for (int c = 0; c < 3; ++c) (*rgb)[i * 3 + c] = static_cast<uint8_t>(p[c] * p[3] / 255);
  }
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

Decoder::~Decoder() {
  if (tj_) tjDestroy(static_cast<tjhandle>(tj_));
}

absl::StatusOr<ImageInfo> Decoder::Info(std::string_view bytes) {
  if (LooksLikeJpeg(bytes)) {
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(static_cast<tjhandle>(tj_), reinterpret_cast<const unsigned char*>(bytes.data()),
                            bytes.size(), &w, &h, &subsamp, &colorspace) != 0) {
      return HeaderError();
    }
    DT_RETURN_IF_ERROR(CheckBudget(w, h));
    const bool plain_chroma = subsamp == TJSAMP_444 || subsamp == TJSAMP_422 || subsamp == TJSAMP_420 ||
                              subsamp == TJSAMP_440;
    return ImageInfo{w, h, true, colorspace == TJCS_YCbCr && plain_chroma};
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
  tjhandle tj = static_cast<tjhandle>(tj_);
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  const auto* buf = reinterpret_cast<const unsigned char*>(bytes.data());
  if (tjDecompressHeader3(tj, buf, bytes.size(), &w, &h, &subsamp, &colorspace) != 0) return HeaderError();
  DT_RETURN_IF_ERROR(CheckBudget(w, h));
  const int eighths = ScaleInEighths(need, min_w, min_h);
  const tjscalingfactor factor{eighths, 8};
  const int sw = TJSCALED(w, factor);
  const int sh = TJSCALED(h, factor);
  Image img{sw, sh, {}};
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  std::vector<uint8_t> raw(static_cast<size_t>(sw) * sh * (cmyk ? 4 : 3));
  int flags = TJFLAG_FASTDCT | TJFLAG_STOPONWARNING;
  if (tjDecompress2(tj, buf, bytes.size(), raw.data(), sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_RGB, flags) != 0) {
    return absl::DataLossError(absl::StrCat("corrupt or truncated JPEG: ", tjGetErrorStr2(tj)));
  }
  if (cmyk) {
    CmykToRgb(raw, sw * sh, &img.rgb);
  } else {
    img.rgb = std::move(raw);
  }
  if (scale) *scale = static_cast<double>(sw) / w;
  return img;
}

absl::StatusOr<ImageRegion> Decoder::DecodeForResize(std::string_view bytes, const Box& need, int out_w, int out_h,
                                                     double* scale) {
  *scale = 1;
  if (!LooksLikeJpeg(bytes)) {
    DT_ASSIGN_OR_RETURN(whole_, Decode(bytes, need, out_w, out_h));
    return ImageRegion::Whole(whole_);
  }
  tjhandle tj = static_cast<tjhandle>(tj_);
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), &w, &h, &subsamp,
                          &colorspace) != 0) {
    return HeaderError();
  }
  DT_RETURN_IF_ERROR(CheckBudget(w, h));
  const int eighths = ScaleInEighths(need, out_w, out_h);
  const tjscalingfactor factor{eighths, 8};
  const int sw = TJSCALED(w, factor);
  const int sh = TJSCALED(h, factor);
  *scale = static_cast<double>(sw) / w;
  const Box scaled{need.x * *scale, need.y * *scale, need.w * *scale, need.h * *scale};
  return DecodeJpegRegion(bytes, eighths, colorspace == TJCS_CMYK || colorspace == TJCS_YCCK, sw, sh,
                          PixelsRead(scaled, sw, sh, out_w, out_h), &scratch_);
}

}  // namespace dtrun::data
