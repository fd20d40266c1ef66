// Tests for datasets/image_decode: the committed fixtures of
// tests/data/images/ (made by make_images.py from known pixels, with Pillow's
// decoding of each as the reference) decode to within 1/255 of the reference;
// bad files (empty, not an image, corrupt, truncated) give their message; a
// 16000 x 16000 JPEG is decoded scaled and a PNG that large is refused; a
// region-of-interest decode gives the whole decode's pixels in its box.
#include "datasets/dataset.h"
#include "datasets/image_decode.h"
#include "datasets/image_transforms.h"
#include "tests/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>

namespace ddpbench {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;

const std::string kImages = std::string(DDPBENCH_SOURCE_DIR) + "/tests/data/images/";
constexpr int64_t kW = 40, kH = 30;

// The largest difference between two equally long byte strings.
int MaxDiff(const std::vector<uint8_t>& got, const std::string& want) {
  EXPECT_EQ(got.size(), want.size());
  int most = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    most = std::max(most, std::abs(int{got[i]} - int{static_cast<uint8_t>(want[i])}));
  return most;
}

RgbImage DecodeFixture(const std::string& name, int denom = 1) {
  return DecodeImage(name, ReadFile(kImages + name), denom);
}

class FixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureTest, MatchesReferenceWithinOneLevel) {
  const std::string name = GetParam();
  const RgbImage image = DecodeFixture(name);
  EXPECT_EQ(image.height, kH);
  EXPECT_EQ(image.width, kW);
  EXPECT_EQ(image.scale_denom, 1);
  const std::string stem = name.substr(0, name.rfind('.'));
  EXPECT_LE(MaxDiff(image.pixels, ReadFile(kImages + stem + ".rgb")), 1) << name;
  const ImageHeader header = ReadImageHeader(name, ReadFile(kImages + name));
  EXPECT_EQ(header.height, kH);
  EXPECT_EQ(header.width, kW);
}

INSTANTIATE_TEST_SUITE_P(Images, FixtureTest,
                         ::testing::Values("baseline.jpg", "progressive.jpg", "subsampled.jpg", "gray.jpg",
                                           "cmyk.jpg", "rgb.png", "gray_png.png", "rgba.png", "png_named.jpg"));

TEST(ImageDecodeTest, LosslessPngIsExactlyTheKnownPixels) {
  const std::string known = ReadFile(kImages + "known.rgb");
  EXPECT_EQ(MaxDiff(DecodeFixture("rgb.png").pixels, known), 0);
  EXPECT_EQ(MaxDiff(DecodeFixture("rgba.png").pixels, known), 0);  // alpha dropped, colour kept
  EXPECT_EQ(MaxDiff(DecodeFixture("png_named.jpg").pixels, known), 0);
  // The lossy JPEG is close to what it was made from on average, not equal
  // (Pillow halves the chroma resolution, which blurs the colour bars' edges).
  const std::vector<uint8_t> jpeg = DecodeFixture("baseline.jpg").pixels;
  double sum = 0;
  for (size_t i = 0; i < jpeg.size(); ++i) sum += std::abs(int{jpeg[i]} - int{static_cast<uint8_t>(known[i])});
  EXPECT_LE(sum / static_cast<double>(jpeg.size()), 10.0);  // measured: 7.1
  EXPECT_GT(MaxDiff(jpeg, known), 0);
}

TEST(ImageDecodeTest, ScaledDecodeHasTheScaledSizeAndContent) {
  const RgbImage full = DecodeFixture("baseline.jpg");
  for (int denom : {2, 4, 8}) {
    const RgbImage small = DecodeFixture("baseline.jpg", denom);
    EXPECT_EQ(small.scale_denom, denom);
    EXPECT_EQ(small.height, (kH + denom - 1) / denom);
    EXPECT_EQ(small.width, (kW + denom - 1) / denom);
    // Each scaled pixel is about the mean of its block of full-size pixels.
    const int64_t y = small.height / 2, x = small.width / 2;
    for (int c = 0; c < 3; ++c) {
      double sum = 0;
      for (int dy = 0; dy < denom; ++dy)
        for (int dx = 0; dx < denom; ++dx)
          sum += full.pixels[static_cast<size_t>(((y * denom + dy) * kW + x * denom + dx) * 3 + c)];
      EXPECT_NEAR(small.pixels[static_cast<size_t>((y * small.width + x) * 3 + c)], sum / (denom * denom), 24)
          << "denom " << denom << " channel " << c;
    }
  }
  // A PNG cannot be decoded scaled: it comes back full size and says so.
  EXPECT_EQ(DecodeFixture("rgb.png", 4).scale_denom, 1);
  EXPECT_THROW(DecodeFixture("baseline.jpg", 3), std::invalid_argument);
}

TEST(ImageDecodeTest, ScaleDenomNeverMakesTheCropSmallerThanTheOutput) {
  EXPECT_EQ(ScaleDenomFor(500, 375, 224, 224), 1);
  EXPECT_EQ(ScaleDenomFor(500, 460, 224, 224), 2);
  EXPECT_EQ(ScaleDenomFor(1000, 1000, 224, 224), 4);
  EXPECT_EQ(ScaleDenomFor(4000, 2000, 224, 224), 8);
  EXPECT_EQ(ScaleDenomFor(100, 100, 224, 224), 1);
}

TEST(ImageDecodeTest, BadFilesNameThePathAndWhatIsWrong) {
  auto message = [](const std::string& bytes) {
    try {
      DecodeImage("dir/x.jpg", bytes);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(""), HasSubstr("dir/x.jpg: empty file (0 bytes)"));
  EXPECT_THAT(message("GIF89a......"), HasSubstr("dir/x.jpg: neither JPEG nor PNG (starts with 47 49 46 38 39 61 2e 2e;"));
  const std::string jpeg = ReadFile(kImages + "baseline.jpg");
  EXPECT_THAT(message(jpeg.substr(0, jpeg.size() / 2)), HasSubstr("dir/x.jpg: truncated JPEG"));
  EXPECT_THAT(message(jpeg.substr(0, 40)), HasSubstr("dir/x.jpg: "));
  std::string corrupt = jpeg;
  for (size_t i = 20; i < 200 && i < corrupt.size(); ++i) corrupt[i] = static_cast<char>(0xFF - i);
  EXPECT_THAT(message(corrupt), HasSubstr("dir/x.jpg: corrupt JPEG"));
  const std::string png = ReadFile(kImages + "rgb.png");
  EXPECT_THAT(message(png.substr(0, png.size() - 30)), HasSubstr("dir/x.jpg: corrupt or truncated PNG"));
  std::string bad_crc = png;
  bad_crc[29] ^= 0x55;  // the IHDR chunk's CRC
  EXPECT_THAT(message(bad_crc), HasSubstr("dir/x.jpg: corrupt PNG"));
}

// --- huge images -------------------------------------------------------------

// How a test JPEG is encoded: the luma component's sampling factors (h x v;
// 2 x 2 is 4:2:0), grayscale, progressive, restart markers every so many rows.
struct Encoding {
  const char* name;
  int h_samp, v_samp;
  bool gray, progressive;
  int restart_rows;
};

// A width x height JPEG whose rows fill_row(y, row) writes (width x 1 or 3
// bytes), encoded row by row (the encoder never holds the image).
std::string EncodeJpeg(int width, int height, const Encoding& e, int quality,
                       const std::function<void(int, uint8_t*)>& fill_row) {
  jpeg_compress_struct c{};
  jpeg_error_mgr errors{};
  c.err = jpeg_std_error(&errors);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = e.gray ? 1 : 3;
  c.in_color_space = e.gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  c.comp_info[0].h_samp_factor = e.h_samp;
  c.comp_info[0].v_samp_factor = e.v_samp;
  c.restart_in_rows = e.restart_rows;
  if (e.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(width * c.input_components));
  JSAMPROW rows[1] = {row.data()};
  for (int y = 0; y < height; ++y) {
    fill_row(y, row.data());
    jpeg_write_scanlines(&c, rows, 1);
  }
  jpeg_finish_compress(&c);
  std::string bytes(reinterpret_cast<const char*>(out), size);
  jpeg_destroy_compress(&c);
  std::free(out);
  return bytes;
}

// A width x height baseline JPEG of flat grey.
std::string FlatJpeg(int width, int height) {
  return EncodeJpeg(width, height, {"gray", 1, 1, true, false, 0}, 50,
                    [width](int, uint8_t* row) { std::fill(row, row + width, uint8_t{128}); });
}

// A PNG claiming width x height: signature, IHDR, a small IDAT (never
// inflated: the size is refused first) and IEND, each chunk with its CRC.
std::string PngHeaderOnly(uint32_t width, uint32_t height) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& type_and_data) {
    const auto crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(type_and_data.data()), static_cast<uInt>(type_and_data.size())));
    return be32(static_cast<uint32_t>(type_and_data.size() - 4)) + type_and_data + be32(crc);
  };
  return std::string("\x89PNG\r\n\x1a\n", 8) +
         chunk("IHDR" + be32(width) + be32(height) + std::string("\x08\x02\x00\x00\x00", 5)) +
         chunk("IDAT" + std::string(8, '\0')) + chunk("IEND");
}

TEST(ImageDecodeTest, HugeJpegIsDecodedScaledBelowThePixelLimit) {
  const std::string bytes = FlatJpeg(16000, 16000);
  const ImageHeader header = ReadImageHeader("huge.jpg", bytes);
  EXPECT_EQ(header.width, 16000);
  const RgbImage image = DecodeImage("huge.jpg", bytes);  // asks for full size, gets 1/4 (16M pixels)
  EXPECT_EQ(image.scale_denom, 4);
  EXPECT_EQ(image.width, 4000);
  EXPECT_LE(image.height * image.width, kMaxDecodedPixels);
  EXPECT_NEAR(image.pixels[image.pixels.size() / 2], 128, 2);
}

TEST(ImageDecodeTest, HugeImagesAboveTheLimitAreRefusedWithAMessage) {
  try {
    DecodeImage("huge.png", PngHeaderOnly(16000, 16000));
    FAIL() << "a 16000 x 16000 PNG was not refused";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("huge.png: 16000 x 16000 PNG: above the limit of 40000000 decoded pixels"));
  }
  // The same pixel limit, scaled down: even 1/8 of this JPEG is above it.
  try {
    DecodeImage("big.jpg", ReadFile(kImages + "baseline.jpg"), 1, 10);
    FAIL() << "not refused";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("big.jpg: 40 x 30 pixels: above the limit of 10 decoded pixels even at 1/8"));
  }
  // A progressive JPEG whose header claims 30000 x 30000: its coefficient
  // buffers (full size whatever the scale) are refused before allocation.
  std::string progressive = ReadFile(kImages + "progressive.jpg");
  const size_t sof = progressive.find("\xFF\xC2");
  ASSERT_NE(sof, std::string::npos);
  for (size_t at : {sof + 5, sof + 7}) {  // height, then width, big-endian
    progressive[at] = static_cast<char>(0x75);
    progressive[at + 1] = static_cast<char>(0x30);
  }
  try {
    DecodeImage("claims.jpg", progressive);
    FAIL() << "not refused";
  } catch (const DataError& e) {  // 1.5 KB cannot hold 14 million blocks
    EXPECT_THAT(e.what(), HasSubstr("claims.jpg: corrupt JPEG: " + std::to_string(progressive.size()) +
                                    " bytes cannot hold the 30000 x 30000 pixels its header claims"));
  }
  progressive += std::string(2 << 20, '\0');  // now large enough for the claim
  try {
    DecodeImage("claims.jpg", progressive);
    FAIL() << "not refused";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("claims.jpg: progressive JPEG of 30000 x 30000 pixels: decoding it needs 5149 MiB"));
  }
}

// --- region-of-interest decode ----------------------------------------------

TEST(RegionDecodeTest, SpansAndImcuStartsOnHandComputedCases) {
  // Full-size rows 100..299 of a 500-row image: at 1/1 rows 100..299 (end 300).
  EXPECT_EQ(ScaledSpan(100, 200, 1, 500).begin, 100);
  EXPECT_EQ(ScaledSpan(100, 200, 1, 500).end, 300);
  // At 1/2 (250 rows): floor(101 / 2) = 50, ceil(301 / 2) = 151; margin 1: 49..152.
  EXPECT_EQ(ScaledSpan(101, 200, 2, 250).begin, 50);
  EXPECT_EQ(ScaledSpan(101, 200, 2, 250).end, 151);
  EXPECT_EQ(ScaledSpan(101, 200, 2, 250, 1).begin, 49);
  EXPECT_EQ(ScaledSpan(101, 200, 2, 250, 1).end, 152);
  // The margin stops at the image's edges; a box of one pixel is never empty.
  EXPECT_EQ(ScaledSpan(0, 500, 1, 500, 1).begin, 0);
  EXPECT_EQ(ScaledSpan(0, 500, 1, 500, 1).end, 500);
  EXPECT_EQ(ScaledSpan(7, 1, 8, 63).begin, 0);
  EXPECT_EQ(ScaledSpan(7, 1, 8, 63).end, 1);
  // 4:2:0 at 1/1 has 16-pixel iMCUs: column 49 starts at 48, 48 stays, 15 goes to 0.
  EXPECT_EQ(ImcuAlignedStart(49, 16), 48);
  EXPECT_EQ(ImcuAlignedStart(48, 16), 48);
  EXPECT_EQ(ImcuAlignedStart(15, 16), 0);
  EXPECT_EQ(ImcuAlignedStart(49, 8), 48);  // 4:4:4 or grayscale at 1/1, 4:2:0 at 1/2
  EXPECT_EQ(ImcuAlignedStart(49, 2), 48);  // 4:2:0 at 1/8
}

// A width x height JPEG of fine texture and colour gradients (so chroma
// upsampling matters).
std::string TexturedJpeg(int width, int height, const Encoding& e) {
  std::mt19937 noise(7);
  const int components = e.gray ? 1 : 3;
  return EncodeJpeg(width, height, e, 90, [&](int y, uint8_t* row) {
    for (int x = 0; x < width; ++x)
      for (int k = 0; k < components; ++k)
        row[x * components + k] = static_cast<uint8_t>((x * (k + 1) + y * (3 - k)) % 200 + noise() % 50);
  });
}

const Encoding kEncodings[] = {{"4:2:0", 2, 2, false, false, 0}, {"4:2:2", 2, 1, false, false, 0},
                               {"4:4:4", 1, 1, false, false, 0}, {"gray", 1, 1, true, false, 0},
                               {"4:2:0 progressive", 2, 2, false, true, 0}, {"4:2:0 restarts", 2, 2, false, false, 2}};

RgbImage DecodeBox(const std::string& bytes, int denom, CropBox box, int64_t margin = kRegionMargin) {
  return DecodeImageFor("roi.jpg", bytes, [&](int64_t, int64_t) { return DecodeRequest{denom, box, margin}; });
}

// The largest difference between the box's pixels in a region decode and in the whole decode.
int BoxDiff(const RgbImage& region, const RgbImage& whole, CropBox box) {
  const Span rows = ScaledSpan(box.top, box.height, whole.scale_denom, whole.height);
  const Span cols = ScaledSpan(box.left, box.width, whole.scale_denom, whole.width);
  int most = 0;
  for (int64_t y = rows.begin; y < rows.end; ++y)
    for (int64_t x = cols.begin * 3; x < cols.end * 3; ++x) {
      const int a = region.pixels[static_cast<size_t>((y - region.top) * region.width * 3 + x - region.left * 3)];
      most = std::max(most, std::abs(a - whole.pixels[static_cast<size_t>(y * whole.width * 3 + x)]));
    }
  return most;
}

// With the margin every box's pixels equal the whole decode's, at every
// scale and sampling; without it (margin 0) the box's first or last column,
// where a partial row starts or ends, differs wherever the box's edge is
// not the image's, and by how much is stated here.
TEST(RegionDecodeTest, TheBoxsPixelsAreTheWholeDecodesBitForBit) {
  constexpr int kWidth = 203, kHeight = 157;  // not multiples of any iMCU
  std::mt19937_64 gen(3);
  int without_margin = 0;
  for (const Encoding& e : kEncodings) {
    const std::string bytes = TexturedJpeg(kWidth, kHeight, e);
    for (int denom : {1, 2, 4, 8}) {
      const RgbImage whole = DecodeImage("roi.jpg", bytes, denom);
      for (int i = 0; i < 12; ++i) {
        const int64_t h = 1 + static_cast<int64_t>(gen() % kHeight), w = 1 + static_cast<int64_t>(gen() % kWidth);
        const CropBox box{static_cast<int64_t>(gen() % (kHeight - h + 1)), static_cast<int64_t>(gen() % (kWidth - w + 1)), h, w};
        const RgbImage region = DecodeBox(bytes, denom, box);
        ASSERT_EQ(region.scale_denom, denom);
        ASSERT_LE(region.height, whole.height);
        ASSERT_EQ(BoxDiff(region, whole, box), 0) << e.name << " 1/" << denom << " box " << box.top << "," << box.left
                                                  << " " << box.height << "x" << box.width;
        const int diff = BoxDiff(DecodeBox(bytes, denom, box, 0), whole, box);
        EXPECT_TRUE(diff == 0 || !e.gray) << "grayscale has no chroma to upsample";
        without_margin = std::max(without_margin, diff);
      }
    }
  }
  EXPECT_GT(without_margin, 0);   // the margin is needed ...
  EXPECT_LE(without_margin, 55);  // ... and this is the most it saves (measured: 55 of 255 on this texture)
}

// The committed fixtures too: CMYK (converted per row) and the others.
TEST(RegionDecodeTest, FixturesRegionsAreTheirWholeDecodes) {
  for (const char* name : {"baseline.jpg", "progressive.jpg", "subsampled.jpg", "gray.jpg", "cmyk.jpg"}) {
    const std::string bytes = ReadFile(kImages + name);
    const RgbImage whole = DecodeImage(name, bytes);
    for (const CropBox box : {CropBox{3, 9, 20, 17}, CropBox{0, 0, 1, 1}, CropBox{29, 39, 1, 1}, CropBox{10, 20, 20, 20}}) {
      const RgbImage region = DecodeBox(bytes, 1, box);
      EXPECT_EQ(BoxDiff(region, whole, box), 0) << name << " box " << box.top << "," << box.left;
    }
  }
}

// A training or evaluation sample (its region decoded) equals the whole
// image decoded at the same scale, then cropped, resized and flipped.
TEST(RegionDecodeTest, SamplesEqualTheWholeDecodeThenCrop) {
  const std::string bytes = TexturedJpeg(503, 377, kEncodings[0]);
  constexpr int64_t kSize = 64;
  auto whole_then_crop = [&](CropBox box, bool flip) {
    const int denom = ScaleDenomFor(static_cast<double>(box.height), static_cast<double>(box.width), kSize, kSize);
    return CropResize(DecodeImage("roi.jpg", bytes, denom), box, kSize, flip);
  };
  for (uint64_t key = 0; key < 16; ++key) {
    const torch::Tensor want = whole_then_crop(RandomResizedCropBox(377, 503, key), FlipOf(key));
    EXPECT_TRUE(torch::equal(TrainSample("roi.jpg", bytes, kSize, key), want)) << "key " << key;
  }
  EXPECT_TRUE(torch::equal(EvalSample("roi.jpg", bytes, kSize), whole_then_crop(EvalCropBox(377, 503, kSize), false)));
}

TEST(RegionDecodeTest, ColumnsStartOnTheImcuAndRowsOnTheBox) {
  constexpr int kWidth = 203, kHeight = 157;
  const CropBox box{61, 49, 40, 100};  // columns 48..149 and rows 60..101 with the margin, at 1/1
  for (const Encoding& e : {kEncodings[0], kEncodings[2], kEncodings[3]}) {
    const std::string bytes = TexturedJpeg(kWidth, kHeight, e);
    for (int denom : {1, 2}) {
      const int64_t imcu = 8 / denom * e.h_samp;
      const RgbImage region = DecodeBox(bytes, denom, box);
      const Span rows = ScaledSpan(box.top, box.height, denom, (kHeight + denom - 1) / denom, kRegionMargin);
      const Span cols = ScaledSpan(box.left, box.width, denom, (kWidth + denom - 1) / denom, kRegionMargin);
      EXPECT_EQ(region.top, rows.begin) << e.name;
      EXPECT_EQ(region.height, rows.end - rows.begin) << e.name;
      EXPECT_EQ(region.left, ImcuAlignedStart(cols.begin, imcu)) << e.name << " 1/" << denom;
      EXPECT_EQ(region.left + region.width, cols.end) << e.name;
    }
  }
  // By hand, 4:2:0 at 1/1: margin 1 gives column 48 (an iMCU boundary) and row 60.
  const RgbImage r = DecodeBox(TexturedJpeg(kWidth, kHeight, kEncodings[0]), 1, box);
  EXPECT_EQ(r.left, 48);
  EXPECT_EQ(r.top, 60);
  EXPECT_EQ(r.width, 150 - 48);
  EXPECT_EQ(r.height, 102 - 60);
}

TEST(RegionDecodeTest, AFileCutShortBelowTheBoxIsStillTruncated) {
  const std::string bytes = TexturedJpeg(203, 157, kEncodings[0]);
  const CropBox top_rows{0, 0, 20, 50};
  EXPECT_EQ(DecodeBox(bytes, 1, top_rows).height, 21);  // the whole file: fine, rows 0..20
  for (size_t keep : {bytes.size() - 2, bytes.size() * 3 / 4}) {
    try {
      DecodeBox(bytes.substr(0, keep), 1, top_rows);
      ADD_FAILURE() << "a file cut to " << keep << " of " << bytes.size() << " bytes was decoded";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("roi.jpg: truncated JPEG"));
    }
  }
  // Bytes after the end marker (a camera's trailer) are no truncation.
  EXPECT_EQ(DecodeBox(bytes + std::string(100, 'x'), 1, top_rows).height, 21);
}

}  // namespace
}  // namespace ddpbench
