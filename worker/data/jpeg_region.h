// Decoding a region of a JPEG, not the whole: the columns a crop reads (libjpeg-turbo's
// jpeg_crop_scanline, widened to the decoder's blocks) and its rows, skipping those above it
// (jpeg_skip_scanlines: entropy decoding only) and stopping after its last. A random crop of
// ImageNet keeps half of an image on average, so about half of the inverse DCT, upsampling and
// colour conversion go. TurboJPEG 2.1's API has no such call, hence libjpeg's API here.
// Untrusted input: libjpeg's errors and warnings (corrupt or truncated data) end the decode with
// DataLoss, as TurboJPEG's TJFLAG_STOPONWARNING does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/data/image.h"

namespace dtrun::data {

// A decoder's reusable output memory: grown as needed, never cleared (each decode writes every
// byte it hands out), so an image costs no allocation, page faults or zeroing. Up to kKeptBytes
// stay between images; more only until the next image that needs less.
class ScratchBuffer {
 public:
  static constexpr size_t kKeptBytes = size_t{16} << 20;
  uint8_t* Reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
};

// Adobe-style (inverted) CMYK to RGB in place, as PIL converts it: `pixels` 4-byte pixels become
// as many 3-byte ones at the same address. Both of Decoder's JPEG paths convert with it.
void CmykToRgbInPlace(uint8_t* px, size_t pixels);

// Decodes `want` (pixels of the image scaled by eighths/8, whose size is scaled_width ×
// scaled_height) or a little more, as RGB into `scratch`; a CMYK or YCCK JPEG (`cmyk`) is
// converted as Decoder::Decode converts it. The region's pixels are those a decode of the whole
// image has there. The result points into `scratch`.
absl::StatusOr<ImageRegion> DecodeJpegRegion(std::string_view bytes, int eighths, bool cmyk, int scaled_width,
                                             int scaled_height, const PixelRect& want, ScratchBuffer* scratch);

}  // namespace dtrun::data
