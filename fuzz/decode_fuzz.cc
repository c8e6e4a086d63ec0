// libFuzzer: image files are untrusted. Any bytes go through the header check and the decoder
// (JPEG by TurboJPEG, anything else by stb_image) under a small pixel budget, and through the
// loader's path (a crop's region decoded alone by libjpeg, then resampled): nothing crashes, and
// nothing larger than the budget is ever decoded.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "worker/data/decode.h"
#include "worker/data/transforms.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kBudget = 1 << 20;  // pixels: keeps every iteration fast
  static dtrun::data::Decoder decoder(kBudget);
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<dtrun::data::ImageInfo> info = decoder.Info(bytes);
  if (!info.ok()) return 0;
  absl::StatusOr<dtrun::data::Image> img =
      decoder.Decode(bytes, dtrun::data::Box{0, 0, double(info->width), double(info->height)}, 8, 8);
  if (img.ok() && (int64_t{img->width} * img->height > kBudget ||
                   img->rgb.size() != size_t(img->width) * img->height * 3)) {
    std::abort();
  }
  // A crop of the lower right quarter, resampled to 8x8 as the loader would (the bytes choose it).
  const dtrun::data::Box crop{info->width / 2.0, info->height / 2.0, info->width / 2.0, info->height / 2.0};
  double scale = 0;
  absl::StatusOr<dtrun::data::ImageRegion> region = decoder.DecodeForResize(bytes, crop, 8, 8, &scale);
  if (region.ok()) {
    if (int64_t{region->full_width} * region->full_height > kBudget) std::abort();
    const dtrun::data::Box scaled{crop.x * scale, crop.y * scale, crop.w * scale, crop.h * scale};
    uint8_t out[8 * 8 * 3];
    dtrun::data::ResizeCrop(*region, scaled, 8, 8, false, out);  // ASan checks every read is in the region
  }
  return 0;
}
