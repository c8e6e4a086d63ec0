// stb_image, compiled here rather than taken from Debian's libstb, so that its allocations are
// bounded. Its decoders trust lengths inside the file: a 60-byte PNG whose IDAT chunk claims 2 GiB
// made stb reallocate 2 GiB before reading a byte. Here every allocation stb asks for is checked
// against a limit set per call, and one over it fails the decode instead.
//
// Only the formats an image folder may hold and stb decodes are compiled in: PNG, BMP, GIF and
// PNM (ppm/pgm). JPEG goes to TurboJPEG (decode.h); TGA, PSD, PIC and HDR are left out, so stray
// bytes are "not an image" rather than noise decoded as a headerless TGA.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/data/image.h"

namespace dtrun::data {

struct StbSize {
  int width = 0;
  int height = 0;
};

// Reads the size from the header only. DataLoss when no compiled-in format recognises the bytes.
absl::StatusOr<StbSize> StbReadSize(std::string_view bytes);

// Decodes to 8-bit RGB. `header` is what StbReadSize returned (the caller has checked it against
// its pixel budget). No allocation may exceed what an image of that size and file length can need
// (20 bytes a pixel, twice the file, 1 MiB); one that would is ResourceExhausted, corrupt data
// DataLoss.
absl::StatusOr<Image> StbDecodeRgb(std::string_view bytes, const StbSize& header);

}  // namespace dtrun::data
