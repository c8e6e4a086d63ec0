// An 8-bit RGB image, rows top to bottom, pixels interleaved (HWC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrun::data {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3

  const uint8_t* row(int y) const { return rgb.data() + static_cast<size_t>(y) * width * 3; }
};

// Pixels of a whole image of full_width × full_height that a decoder decoded only in part: the
// `width` × `height` pixels whose top-left is (x0, y0) of the whole, at `data` (HWC, row stride
// width * 3). Not owning.
struct ImageRegion {
  const uint8_t* data = nullptr;
  int width = 0, height = 0;
  int x0 = 0, y0 = 0;
  int full_width = 0, full_height = 0;

  static ImageRegion Whole(const Image& img) {
    return ImageRegion{img.rgb.data(), img.width, img.height, 0, 0, img.width, img.height};
  }
  // Row y of the whole image (y0 <= y < y0 + height).
  const uint8_t* row(int y) const { return data + static_cast<size_t>(y - y0) * width * 3; }
};

// Pixels [x0, x1) × [y0, y1) of an image.
struct PixelRect {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// A rectangle in an image's pixel coordinates (may be fractional after scaling).
struct Box {
  double x = 0, y = 0, w = 0, h = 0;
};

}  // namespace dtrun::data
