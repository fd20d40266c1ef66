// Tests for datasets/image_decode: the committed fixtures of
// tests/data/images/ (made by make_images.py from known pixels, with Pillow's
// decoding of each as the reference) decode to within 1/255 of the reference;
// bad files (empty, not an image, corrupt, truncated) give their message; a
// 16000 x 16000 JPEG is decoded scaled and a PNG that large is refused.
#include "datasets/dataset.h"
#include "datasets/image_decode.h"
#include "tests/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>

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

// A width x height baseline JPEG of flat grey, encoded row by row (the
// encoder never holds the image).
std::string FlatJpeg(int width, int height) {
  jpeg_compress_struct c{};
  jpeg_error_mgr errors{};
  c.err = jpeg_std_error(&errors);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = 1;
  c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 50, TRUE);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(width), 128);
  JSAMPROW rows[1] = {row.data()};
  while (c.next_scanline < c.image_height) jpeg_write_scanlines(&c, rows, 1);
  jpeg_finish_compress(&c);
  std::string bytes(reinterpret_cast<const char*>(out), size);
  jpeg_destroy_compress(&c);
  std::free(out);
  return bytes;
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

}  // namespace
}  // namespace ddpbench
