#include "worker/data/encode.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/data/transforms.h"

namespace dtrun::data {

absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, image.rgb.data(), image.width, 0, image.height, TJPF_RGB, &out, &size, TJSAMP_420,
                       quality, TJFLAG_FASTDCT);
  std::string result;
  if (rc == 0) result.assign(reinterpret_cast<char*>(out), size);
  std::string error = rc == 0 ? "" : tjGetErrorStr2(tj);
  tjFree(out);
  tjDestroy(tj);
  if (rc != 0) return absl::InternalError(absl::StrCat("JPEG encoding failed: ", error));
  return result;
}

Image ResizeShorterSide(const Image& image, int shorter) {
  double s = static_cast<double>(shorter) / std::min(image.width, image.height);
  int w = std::max(1, static_cast<int>(std::lround(image.width * s)));
  int h = std::max(1, static_cast<int>(std::lround(image.height * s)));
  Image out{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  ResizeCrop(image, Box{0, 0, static_cast<double>(image.width), static_cast<double>(image.height)}, w, h, false,
             out.rgb.data());
  return out;
}

}  // namespace dtrun::data
