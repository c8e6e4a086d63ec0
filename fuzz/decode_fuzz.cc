// libFuzzer: image files are untrusted. Any bytes go through the header check and the decoder
// (JPEG by TurboJPEG, anything else by stb_image) under a small pixel budget: nothing crashes,
// and nothing larger than the budget is ever decoded.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "worker/data/decode.h"

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
  return 0;
}
