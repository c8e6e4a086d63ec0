// JPEG encoding with TurboJPEG (for dtdata: demo sets, pre-resized shards, benchmark images).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/data/image.h"

namespace dtrun::data {

absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality = 90);
// Resizes so the shorter side is `shorter` (aspect kept), antialiased bilinear.
Image ResizeShorterSide(const Image& image, int shorter);

}  // namespace dtrun::data
