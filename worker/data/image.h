// An 8-bit RGB image, rows top to bottom, pixels interleaved (HWC).
#pragma once

#include <cstdint>
#include <vector>

namespace dtrun::data {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3

  const uint8_t* row(int y) const { return rgb.data() + static_cast<size_t>(y) * width * 3; }
};

// A rectangle in an image's pixel coordinates (may be fractional after scaling).
struct Box {
  double x = 0, y = 0, w = 0, h = 0;
};

}  // namespace dtrun::data
