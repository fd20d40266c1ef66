// See image_decode.h. libjpeg-turbo through its libjpeg API (Debian's
// libjpeg62-turbo): that API, unlike TurboJPEG 2.1's, exposes the DCT scaling
// factors and the CMYK/YCCK colour spaces we convert ourselves. libjpeg
// reports errors by calling a function that must not return, so errors jump
// (longjmp) back to the one function that set the jump; every object that
// lives across the jump is owned by the caller.
#include "datasets/image_decode.h"

#include "datasets/dataset.h"

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <memory>

namespace ddpbench {
namespace {

// A progressive JPEG's whole-image coefficient buffers are refused above this.
constexpr int64_t kMaxProgressiveBytes = int64_t{512} << 20;

[[noreturn]] void Fail(const std::string& path, const std::string& what) { throw DataError(path + ": " + what); }

bool IsJpeg(const std::string& b) {
  return b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8 &&
         static_cast<uint8_t>(b[2]) == 0xFF;
}
bool IsPng(const std::string& b) { return b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0; }

std::string FirstBytes(const std::string& b) {
  std::string hex;
  for (size_t i = 0; i < b.size() && i < 8; ++i) {
    static const char* digits = "0123456789abcdef";
    const auto c = static_cast<uint8_t>(b[i]);
    hex += std::string(i ? " " : "") + digits[c >> 4] + digits[c & 15];
  }
  return hex;
}

ImageFormat FormatOf(const std::string& path, const std::string& bytes) {
  if (bytes.empty()) Fail(path, "empty file (0 bytes); accepted images are JPEG and PNG");
  if (IsJpeg(bytes)) return ImageFormat::kJpeg;
  if (IsPng(bytes)) return ImageFormat::kPng;
  Fail(path, "neither JPEG nor PNG (starts with " + FirstBytes(bytes) + "; accepted images are JPEG and PNG)");
}

// --- JPEG ------------------------------------------------------------------

struct JpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void JpegFail(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings (level -1) are ignored as PIL ignores them, except the end of the
// data before the image is complete: that file is truncated.
void JpegMessage(j_common_ptr info, int level) {
  if (level < 0 && info->err->msg_code == JWRN_JPEG_EOF) JpegFail(info);
}

// Everything that lives across a longjmp, owned by the caller.
struct JpegDecoder {
  jpeg_decompress_struct info{};
  JpegErrors errors{};
  std::vector<uint8_t> row;  // one CMYK scanline
  int denom = 1;             // the DCT scale's denominator
  bool created = false;
  ~JpegDecoder() {
    if (created) jpeg_destroy_decompress(&info);
  }
};

// CMYK (Adobe's inverted form when the file says so) to RGB by PIL's rule:
// R = (255 - K) - C (255 - K) / 255, rounded, and likewise for G and B.
void CmykRowToRgb(const uint8_t* cmyk, uint8_t* rgb, int64_t width, bool inverted) {
  for (int64_t x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const int k = inverted ? 255 - cmyk[3] : cmyk[3];
    const int nk = 255 - k;
    for (int c = 0; c < 3; ++c) {
      const int ink = inverted ? 255 - cmyk[c] : cmyk[c];
      const int t = ink * nk + 128;
      rgb[c] = static_cast<uint8_t>(nk - (((t >> 8) + t) >> 8));
    }
  }
}

int CheckedDenom(int scale_denom) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
    throw std::invalid_argument("DecodeImage: scale_denom " + std::to_string(scale_denom) + " (accepted: 1, 2, 4, 8)");
  return scale_denom;
}

// Whether an FF D9 (end of image) marker follows `from`, the first scan's
// data: inside entropy-coded data a 0xFF byte is always followed by 0x00 or
// a restart marker, so a file cut short in or after its image data has none
// (an embedded thumbnail's comes before `from`). Searched from the end, so a
// whole file answers at once.
bool HasEndMarker(const std::string& bytes, size_t from) {
  for (size_t i = bytes.size(); i >= from + 2; --i) {
    if (static_cast<uint8_t>(bytes[i - 2]) == 0xFF && static_cast<uint8_t>(bytes[i - 1]) == 0xD9) return true;
  }
  return false;
}

// The started decompressor's rows and (iMCU-aligned) columns that hold the
// request's box and margin (every pixel when box.height is 0) into out.
// Returns whether it stopped before the last row. May longjmp: only
// trivially destructible locals.
bool ReadRegion(JpegDecoder* d, const DecodeRequest& request, RgbImage* out) {
  const CropBox& box = request.box;
  jpeg_decompress_struct& info = d->info;
  const int64_t whole_h = info.output_height, whole_w = info.output_width;
  Span rows{0, whole_h}, cols{0, whole_w};
  if (box.height > 0) {
    rows = ScaledSpan(box.top, box.height, d->denom, whole_h, request.margin);
    cols = ScaledSpan(box.left, box.width, d->denom, whole_w, request.margin);
  }
  auto x = static_cast<JDIMENSION>(cols.begin), w = static_cast<JDIMENSION>(cols.end - cols.begin);
  if (w < whole_w) jpeg_crop_scanline(&info, &x, &w);  // x moves left to an iMCU boundary
  out->top = rows.begin;
  out->left = x;
  out->height = rows.end - rows.begin;
  out->width = info.output_width;
  const bool cmyk = info.out_color_space == JCS_CMYK;
  out->pixels.resize(static_cast<size_t>(out->height * out->width * 3));
  if (cmyk) d->row.resize(static_cast<size_t>(out->width * 4));
  if (rows.begin > 0) jpeg_skip_scanlines(&info, static_cast<JDIMENSION>(rows.begin));
  const auto stride = static_cast<size_t>(out->width * 3);
  while (info.output_scanline < rows.end) {
    uint8_t* dest = out->pixels.data() + static_cast<size_t>(info.output_scanline - rows.begin) * stride;
    JSAMPROW target = cmyk ? d->row.data() : dest;
    jpeg_read_scanlines(&info, &target, 1);
    if (cmyk) CmykRowToRgb(d->row.data(), dest, out->width, info.saw_Adobe_marker);
  }
  if (rows.end < whole_h) return true;  // the rest is never decoded (the decoder is destroyed, not finished)
  jpeg_finish_decompress(&info);
  return false;
}

// Sets the DCT scale from the request's, raised while the output is above
// max_pixels. Returns "" or why the image is refused.
std::string ChooseScale(JpegDecoder* d, int requested_denom, int64_t max_pixels, const RgbImage& full) {
  d->denom = CheckedDenom(requested_denom);
  d->info.scale_num = 1;
  for (;;) {
    d->info.scale_denom = static_cast<unsigned>(d->denom);
    jpeg_calc_output_dimensions(&d->info);
    if (static_cast<int64_t>(d->info.output_width) * d->info.output_height <= max_pixels || d->denom == 8) break;
    d->denom *= 2;
  }
  if (static_cast<int64_t>(d->info.output_width) * d->info.output_height > max_pixels) {
    return std::to_string(full.width) + " x " + std::to_string(full.height) + " pixels: above the limit of " +
           std::to_string(max_pixels) + " decoded pixels even at 1/8 scale";
  }
  // A progressive JPEG keeps every DCT coefficient of the full-size image
  // (2 bytes each) whatever the output scale: refuse before allocating that.
  const int64_t coefficient_bytes = full.width * full.height * d->info.num_components * 2;
  if (d->info.progressive_mode && coefficient_bytes > kMaxProgressiveBytes) {
    return "progressive JPEG of " + std::to_string(full.width) + " x " + std::to_string(full.height) + " pixels: " +
           "decoding it needs " + std::to_string(coefficient_bytes >> 20) + " MiB, above the limit of " +
           std::to_string(kMaxProgressiveBytes >> 20) + " MiB";
  }
  return "";
}

// Returns "" on success, else what is wrong (libjpeg's words or the limit).
// request_for: null reads the header only; else it picks the DCT scale and
// the box from the full size.
std::string DecodeJpegInto(JpegDecoder* d, const std::string& bytes, int64_t max_pixels, RgbImage* out,
                           const RequestFor* request_for) {
  d->info.err = jpeg_std_error(&d->errors.pub);
  d->errors.pub.error_exit = JpegFail;
  d->errors.pub.emit_message = JpegMessage;
  if (setjmp(d->errors.jump)) {
    const std::string what = d->errors.message;
    return d->errors.pub.msg_code == JWRN_JPEG_EOF ? "truncated JPEG (" + what + ")" : "corrupt JPEG: " + what;
  }
  jpeg_create_decompress(&d->info);
  d->created = true;
  jpeg_mem_src(&d->info, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&d->info, TRUE);
  const auto scan_start = static_cast<size_t>(d->info.src->next_input_byte - reinterpret_cast<const JOCTET*>(bytes.data()));
  out->height = d->info.image_height;
  out->width = d->info.image_width;
  // Huffman coding spends at least one bit per 8 x 8 block: a file too small
  // for the size its header claims is corrupt (and never costs that allocation).
  const int64_t blocks = ((out->height + 7) / 8) * ((out->width + 7) / 8);
  if (!d->info.arith_code && static_cast<int64_t>(bytes.size()) * 8 < blocks) {
    return "corrupt JPEG: " + std::to_string(bytes.size()) + " bytes cannot hold the " + std::to_string(out->width) +
           " x " + std::to_string(out->height) + " pixels its header claims";
  }
  if (request_for == nullptr) return "";
  const DecodeRequest request = (*request_for)(out->height, out->width);
  const bool cmyk = d->info.jpeg_color_space == JCS_CMYK || d->info.jpeg_color_space == JCS_YCCK;
  d->info.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  {  // scoped: no string may live across the jump back from a libjpeg error below
    const std::string refused = ChooseScale(d, request.scale_denom, max_pixels, *out);
    if (!refused.empty()) return refused;
  }
  out->scale_denom = d->denom;
  jpeg_start_decompress(&d->info);
  if (ReadRegion(d, request, out) && !HasEndMarker(bytes, scan_start))
    return "truncated JPEG (no end-of-image marker after the image data)";
  return "";
}

// --- PNG -------------------------------------------------------------------

struct PngImage {
  png_image image{};
  ~PngImage() { png_image_free(&image); }
};

void DecodePng(const std::string& path, const std::string& bytes, int64_t max_pixels, RgbImage* out) {
  PngImage png;
  png.image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png.image, bytes.data(), bytes.size()))
    Fail(path, std::string("corrupt PNG: ") + png.image.message);
  out->height = png.image.height;
  out->width = png.image.width;
  if (out->height * out->width > max_pixels) {
    Fail(path, std::to_string(out->width) + " x " + std::to_string(out->height) + " PNG: above the limit of " +
                   std::to_string(max_pixels) + " decoded pixels (a PNG cannot be decoded scaled)");
  }
  png.image.format = PNG_FORMAT_RGBA;  // alpha kept here and dropped below, as PIL's convert("RGB") does
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(png.image));
  if (!png_image_finish_read(&png.image, nullptr, rgba.data(), 0, nullptr))
    Fail(path, std::string("corrupt or truncated PNG: ") + png.image.message);
  out->pixels.resize(static_cast<size_t>(out->height * out->width * 3));
  for (size_t i = 0, n = static_cast<size_t>(out->height * out->width); i < n; ++i)
    std::memcpy(&out->pixels[i * 3], &rgba[i * 4], 3);
}

ImageHeader PngHeader(const std::string& path, const std::string& bytes) {
  if (bytes.size() < 24 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0)
    Fail(path, "corrupt PNG: no IHDR header");
  auto be32 = [&](size_t at) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + at);
    return static_cast<int64_t>(uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]);
  };
  ImageHeader h{ImageFormat::kPng, be32(20), be32(16)};
  if (h.height <= 0 || h.width <= 0 || h.height > 0x7FFFFFFF || h.width > 0x7FFFFFFF)
    Fail(path, "corrupt PNG: size " + std::to_string(h.width) + " x " + std::to_string(h.height));
  return h;
}

}  // namespace

ImageHeader ReadImageHeader(const std::string& path, const std::string& bytes) {
  if (FormatOf(path, bytes) == ImageFormat::kPng) return PngHeader(path, bytes);
  auto decoder = std::make_unique<JpegDecoder>();
  RgbImage size;
  const std::string why = DecodeJpegInto(decoder.get(), bytes, 0, &size, /*scale_for=*/nullptr);
  if (!why.empty()) Fail(path, why);
  return {ImageFormat::kJpeg, size.height, size.width};
}

RgbImage DecodeImage(const std::string& path, const std::string& bytes, int scale_denom, int64_t max_pixels) {
  CheckedDenom(scale_denom);
  return DecodeImageFor(path, bytes, [scale_denom](int64_t, int64_t) { return DecodeRequest{scale_denom, {}}; },
                        max_pixels);
}

RgbImage DecodeImageFor(const std::string& path, const std::string& bytes, const RequestFor& request_for,
                        int64_t max_pixels) {
  RgbImage out;
  if (FormatOf(path, bytes) == ImageFormat::kPng) {
    const ImageHeader header = PngHeader(path, bytes);
    CheckedDenom(request_for(header.height, header.width).scale_denom);  // chosen, but a PNG decodes whole
    DecodePng(path, bytes, max_pixels, &out);
    return out;
  }
  auto decoder = std::make_unique<JpegDecoder>();
  const std::string why = DecodeJpegInto(decoder.get(), bytes, max_pixels, &out, &request_for);
  if (!why.empty()) Fail(path, why);
  return out;
}

Span ScaledSpan(int64_t start, int64_t length, int denom, int64_t size, int64_t margin) {
  const int64_t first = std::min(start / denom, size - 1), last = (start + length + denom - 1) / denom;
  const int64_t begin = std::max<int64_t>(0, first - margin);
  return {begin, std::clamp(last + margin, first + 1, size)};
}

int64_t ImcuAlignedStart(int64_t begin, int64_t imcu) { return begin / imcu * imcu; }

int ScaleDenomFor(double crop_h, double crop_w, int64_t out_h, int64_t out_w) {
  for (int d : {8, 4, 2}) {
    if (crop_h / d >= static_cast<double>(out_h) && crop_w / d >= static_cast<double>(out_w)) return d;
  }
  return 1;
}

}  // namespace ddpbench
