// Decoding one JPEG or PNG file to 8-bit RGB for the ImageFolder source.
// JPEGs are decoded by libjpeg-turbo at a DCT scale of 1/1, 1/2,
// 1/4 or 1/8 chosen by the caller, so a crop much larger than the network's
// input never pays for a full-size decode (what DALI and PIL's draft mode
// do). The format comes from the file's first bytes, not its name (a PNG
// named .jpg decodes). Kept free of LibTorch so it compiles in a moment.
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
  int64_t height = 0, width = 0;
  int scale_denom = 1;          // JPEG: decoded at 1/scale_denom of the full size
  std::vector<uint8_t> pixels;  // height x width x 3, row-major
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

// Picks the DCT scale's denominator (1, 2, 4 or 8) from the full size.
using ScaleChooser = std::function<int(int64_t height, int64_t width)>;

// As DecodeImage, with the scale chosen by scale_for from the header's full
// size, so the header is read once (a training sample chooses its crop
// there). A PNG decodes at full size whatever is chosen.
RgbImage DecodeImageFor(const std::string& path, const std::string& bytes, const ScaleChooser& scale_for,
                        int64_t max_pixels = kMaxDecodedPixels);

// The largest DCT scale denominator d in {1, 2, 4, 8} for which a crop of
// crop_h x crop_w full-size pixels still has at least out_h x out_w pixels
// once decoded at 1/d (so the resize to the output only ever shrinks).
int ScaleDenomFor(double crop_h, double crop_w, int64_t out_h, int64_t out_w);

}  // namespace ddpbench
