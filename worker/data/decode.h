// Image decoding: JPEG with libjpeg-turbo (TurboJPEG), decoding at 1/2, 1/4 or 1/8 scale in the
// DCT domain when the caller needs less resolution, and for a crop only its region (jpeg_region.h);
// PNG, BMP, GIF and PNM (also when misnamed .jpg) with stb_image under an allocation bound
// (stb_decode.h). Grey and CMYK JPEGs come out as RGB.
// Thread-compatible: one Decoder per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/data/image.h"
#include "worker/data/jpeg_region.h"

namespace dtrun::data {

struct ImageInfo {
  int width = 0;
  int height = 0;
  bool jpeg = false;
  // A 3-component YCbCr JPEG with 4:4:4, 4:2:2, 4:2:0 or 4:4:0 chroma: what every JPEG decoder
  // takes, a GPU's included (not grey, CMYK or 4:1:1).
  bool plain_ycbcr = false;
};

class Decoder {
 public:
  // Images are untrusted: a 13 KB file can claim 60000×60000 pixels. Headers that claim more
  // than this are refused before anything is allocated (64 Mi pixels: 192 MiB of RGB per decoding
  // thread; ImageNet's largest is about 15 M).
  static constexpr int64_t kDefaultMaxPixels = int64_t{64} << 20;

  explicit Decoder(int64_t max_pixels = kDefaultMaxPixels);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Reads the size without decoding. DataLoss for corrupt or unknown data, ResourceExhausted for
  // a size over the pixel budget.
  absl::StatusOr<ImageInfo> Info(std::string_view bytes);
  // Decodes the whole image, as small as possible while the region `need` (in full-size pixel
  // coordinates) keeps at least `min_w`×`min_h` pixels. Returns the image and the scale used
  // (1, 1/2, 1/4 or 1/8) through `scale`. DataLoss for corrupt or truncated data,
  // ResourceExhausted over the pixel budget.
  absl::StatusOr<Image> Decode(std::string_view bytes, const Box& need, int min_w, int min_h,
                               double* scale = nullptr);
  // For a crop resampled to out_w × out_h (data/transforms.h): at the scale Decode would choose
  // for min_w × min_h = out_w × out_h, a JPEG's region that ResizeCrop of `need` (scaled by
  // `*scale`) reads, decoded alone (data/jpeg_region.h); other formats whole. Points into this
  // decoder's memory, valid until its next call: no allocation per image.
  absl::StatusOr<ImageRegion> DecodeForResize(std::string_view bytes, const Box& need, int out_w, int out_h,
                                              double* scale);

 private:
  struct JpegHeader {
    int width = 0, height = 0;
    int subsampling = 0, colorspace = 0;  // TurboJPEG's TJSAMP_* and TJCS_*
    bool cmyk() const;                    // CMYK or YCCK: decoded as CMYK, then made RGB
  };
  // The size Decode and DecodeForResize decode a JPEG at.
  struct ScaledJpeg {
    int eighths = 8;
    int width = 0, height = 0;
    double scale = 1;  // width / the full width
  };
  // The smallest DCT-domain scale (1/8, 1/4, 1/2) that keeps `need` at least min_w × min_h.
  static ScaledJpeg ScaleFor(const JpegHeader& header, const Box& need, int min_w, int min_h);

  absl::Status CheckBudget(int width, int height) const;
  absl::Status HeaderError();  // DataLoss; starts a fresh handle
  // A JPEG's header, read and held to the pixel budget.
  absl::StatusOr<JpegHeader> ReadJpegHeader(std::string_view bytes);

  void* tj_ = nullptr;  // tjhandle
  int64_t max_pixels_;
  ScratchBuffer scratch_;  // DecodeForResize's JPEG regions
  Image whole_;            // DecodeForResize's other images
};

}  // namespace dtrun::data
