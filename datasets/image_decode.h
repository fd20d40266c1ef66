// Decoding one JPEG or PNG file to 8-bit RGB for the ImageFolder source.
// JPEGs are decoded by libjpeg-turbo at a DCT scale of 1/1, 1/2,
// 1/4 or 1/8 chosen by the caller, so a crop much larger than the network's
// input never pays for a full-size decode (what DALI and PIL's draft mode
// do), and only over the rows and columns that hold the caller's crop
// (region-of-interest decode, as DALI's random-crop decoder does): the crop
// is chosen from the header before any pixel is decoded. The format comes
// from the file's first bytes, not its name (a PNG named .jpg decodes). Kept
// free of LibTorch so it compiles in a moment.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddpbench {

enum class ImageFormat { kJpeg, kPng };

struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int64_t height = 0, width = 0;
};

struct RgbImage {
  int64_t height = 0, width = 0;  // of `pixels`
  int scale_denom = 1;            // JPEG: decoded at 1/scale_denom of the full size
  // Where pixels' first row and column lie in the whole image decoded at
  // 1/scale_denom (non-zero after a region-of-interest decode).
  int64_t top = 0, left = 0;
  std::vector<uint8_t> pixels;  // height x width x 3, row-major
};

// A crop of the full-size image: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator==(const CropBox& o) const {
    return top == o.top && left == o.left && height == o.height && width == o.width;
  }
};

// Decoded pixels kept beyond the box on each side: libjpeg-turbo's smooth
// chroma upsampling treats a partial row's first and last pixel as the
// image's edge, so those may differ from a whole decode.
constexpr int64_t kRegionMargin = 1;

// What a caller wants of an image: the DCT scale's denominator (1, 2, 4 or 8)
// and the box of the full-size image it will use (height 0: all of it).
struct DecodeRequest {
  int scale_denom = 1;
  CropBox box;
  int64_t margin = kRegionMargin;
};

// Decoded images are refused above this many pixels (after DCT scaling): a
// 16000 x 16000 JPEG is decoded at a scale that fits, a PNG that large (which
// cannot be decoded scaled) is refused with a message.
constexpr int64_t kMaxDecodedPixels = 40'000'000;

// The size and format from the header alone. Throws DataError naming `path`
// (an empty file, neither JPEG nor PNG, a corrupt header).
ImageHeader ReadImageHeader(const std::string& path, const std::string& bytes);

// The whole image as RGB (grayscale replicated, CMYK converted as PIL does,
// PNG alpha dropped). A JPEG is decoded at 1/scale_denom (1, 2, 4 or 8), or
// coarser when that would exceed max_pixels. Throws DataError naming `path`
// and what is wrong (truncated data, corrupt data, above the pixel limit).
RgbImage DecodeImage(const std::string& path, const std::string& bytes, int scale_denom = 1,
                     int64_t max_pixels = kMaxDecodedPixels);

// Picks what to decode from the full size (a training sample draws its crop there).
using RequestFor = std::function<DecodeRequest(int64_t height, int64_t width)>;

// As DecodeImage, with the scale and box chosen by request_for from the
// header's full size, so the header is read once. A JPEG is decoded only
// over the rows that hold the box and its columns widened to whole iMCUs
// (libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines), with
// the request's margin more pixels each side, so the box's pixels are bit for bit
// those of a whole decode; the rows below it are never decoded (a file cut
// short there is still refused, by its missing end marker). A PNG decodes
// whole whatever is asked.
RgbImage DecodeImageFor(const std::string& path, const std::string& bytes, const RequestFor& request_for,
                        int64_t max_pixels = kMaxDecodedPixels);

// Rows (or columns) [begin, end) of an image decoded at 1/denom (size
// pixels) that hold the full-size pixels [start, start + length), widened by
// margin each side and kept within [0, size), never empty.
struct Span {
  int64_t begin = 0, end = 0;
};
Span ScaledSpan(int64_t start, int64_t length, int denom, int64_t size, int64_t margin = 0);

// Where a partial row starts: libjpeg-turbo moves it left to an iMCU
// boundary (imcu decoded pixels: 8/denom times the largest horizontal
// sampling factor; 8/denom for grayscale).
int64_t ImcuAlignedStart(int64_t begin, int64_t imcu);

// The largest DCT scale denominator d in {1, 2, 4, 8} for which a crop of
// crop_h x crop_w full-size pixels still has at least out_h x out_w pixels
// once decoded at 1/d (so the resize to the output only ever shrinks).
int ScaleDenomFor(double crop_h, double crop_w, int64_t out_h, int64_t out_w);

}  // namespace ddpbench
