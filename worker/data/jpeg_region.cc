#include "worker/data/jpeg_region.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dtrun::data {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// A warning is corrupt data libjpeg would decode past (grey where the file ends): an error here.
void EmitMessage(j_common_ptr cinfo, int level) {
  if (level < 0) ErrorExit(cinfo);
}

struct Rows {
  int x0 = 0, y0 = 0, width = 0, height = 0;
  int components = 3;
};

// The libjpeg calls, in a frame that holds no C++ object a longjmp would skip. False on an error
// (its text in err->message). `*rows` says what landed in `out`.
bool DecodeRows(jpeg_decompress_struct* cinfo, ErrorManager* err, const unsigned char* data, unsigned long size,
                int eighths, bool cmyk, int scaled_width, int scaled_height, const PixelRect& want, uint8_t* out,
                size_t out_bytes, Rows* rows) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, size);
  jpeg_read_header(cinfo, TRUE);
  cinfo->scale_num = static_cast<unsigned>(eighths);
  cinfo->scale_denom = 8;
  cinfo->dct_method = JDCT_IFAST;  // as TurboJPEG's TJFLAG_FASTDCT
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(cinfo);
  if (static_cast<int>(cinfo->output_width) != scaled_width ||
      static_cast<int>(cinfo->output_height) != scaled_height) {
    std::snprintf(err->message, sizeof(err->message), "decodes to %ux%u, not the %dx%d its header said",
                  cinfo->output_width, cinfo->output_height, scaled_width, scaled_height);
    return false;
  }
  // One block row and column more on each side than asked: a block's upsampled chroma takes in
  // its neighbours', and those at a region's edge are its edge's.
  const int block_w = cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size;
  const int block_h = cinfo->max_v_samp_factor * cinfo->min_DCT_scaled_size;
  const int x0 = std::max(0, want.x0 - block_w), x1 = std::min(scaled_width, want.x1 + block_w);
  const int y0 = std::max(0, want.y0 - block_h), y1 = std::min(scaled_height, want.y1);
  JDIMENSION xoffset = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(x1 - x0);
  if (width < cinfo->output_width) jpeg_crop_scanline(cinfo, &xoffset, &width);  // moves xoffset left to a block
  if (y0 > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(y0));
  const size_t stride = static_cast<size_t>(cinfo->output_width) * cinfo->output_components;
  if (stride * static_cast<size_t>(y1 - y0) > out_bytes) {  // a file whose blocks are larger than any JPEG's
    std::snprintf(err->message, sizeof(err->message), "blocks of %dx%d pixels", block_w, block_h);
    return false;
  }
  while (static_cast<int>(cinfo->output_scanline) < y1) {
    JSAMPROW row = out + (cinfo->output_scanline - static_cast<JDIMENSION>(y0)) * stride;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      std::snprintf(err->message, sizeof(err->message), "no row %u", cinfo->output_scanline);
      return false;
    }
  }
  *rows = Rows{static_cast<int>(xoffset), y0, static_cast<int>(cinfo->output_width), y1 - y0, cinfo->output_components};
  jpeg_abort_decompress(cinfo);  // the rows below the region stay undecoded
  return true;
}

}  // namespace

void CmykToRgbInPlace(uint8_t* px, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = px + i * 4;
    const uint8_t k = p[3];
    uint8_t rgb[3];
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(p[c] * k / 255);
    std::memcpy(px + i * 3, rgb, 3);
  }
}

uint8_t* ScratchBuffer::Reserve(size_t bytes) {
  // A rare huge image's memory goes with the next ordinary one: a loader thread each keeps its own.
  if (bytes > capacity_ || (capacity_ > kKeptBytes && bytes <= kKeptBytes)) {
    data_.reset(new uint8_t[bytes]);  // uninitialised: every byte handed out is written first
    capacity_ = bytes;
  }
  return data_.get();
}

absl::StatusOr<ImageRegion> DecodeJpegRegion(std::string_view bytes, int eighths, bool cmyk, int scaled_width,
                                             int scaled_height, const PixelRect& want, ScratchBuffer* scratch) {
  if (want.x0 < 0 || want.y0 < 0 || want.x1 > scaled_width || want.y1 > scaled_height || want.x0 >= want.x1 ||
      want.y0 >= want.y1) {
    return absl::InvalidArgumentError(absl::StrCat("region [", want.x0, ",", want.x1, ")x[", want.y0, ",", want.y1,
                                                   ") is not inside the ", scaled_width, "x", scaled_height, " image"));
  }
  // Every column, 4 bytes a pixel (CMYK), for the rows asked and one block row above (32 at most).
  const size_t out_bytes = static_cast<size_t>(scaled_width) * 4 * (want.y1 - std::max(0, want.y0 - 32));
  uint8_t* out = scratch->Reserve(out_bytes);
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof(cinfo));
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = ErrorExit;
  err.pub.emit_message = EmitMessage;
  err.message[0] = '\0';
  Rows rows;
  const bool ok = DecodeRows(&cinfo, &err, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), eighths,
                             cmyk, scaled_width, scaled_height, want, out, out_bytes, &rows);
  jpeg_destroy_decompress(&cinfo);
  if (!ok) return absl::DataLossError(absl::StrCat("corrupt or truncated JPEG: ", err.message));
  if (rows.components == 4) CmykToRgbInPlace(out, static_cast<size_t>(rows.width) * rows.height);
  return ImageRegion{out, rows.width, rows.height, rows.x0, rows.y0, scaled_width, scaled_height};
}

}  // namespace dtrun::data
