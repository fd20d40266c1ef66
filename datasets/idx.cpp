// IDX reader (MNIST, Fashion-MNIST: http://yann.lecun.com/exdb/mnist/). The
// format is a big-endian header (magic, then one uint32 per dimension) followed
// by raw bytes, so the file is read whole and every size is checked against the
// header before a byte is copied: a bad download must fail loudly with the
// file's name, never train on garbage.
#include "datasets/internal.h"

#include <torch/torch.h>

#include <cstring>

namespace ddpbench {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: unsigned byte, 3 dims
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: unsigned byte, 1 dim
constexpr int64_t kIdxClasses = 10;

uint32_t BigEndian32(const std::string& data, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data() + offset);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Checks the header's size and magic; returns the dimensions that follow it.
std::vector<uint64_t> ReadHeader(const std::string& path, const std::string& data,
                                 uint32_t expected_magic, size_t dims, const char* what) {
  const size_t header = 4 * (1 + dims);
  if (data.size() < header) {
    throw DataError(path + ": truncated IDX " + what + " file: expected at least " +
                    std::to_string(header) + " header bytes, found " + std::to_string(data.size()));
  }
  const uint32_t magic = BigEndian32(data, 0);
  if (magic != expected_magic) {
    throw DataError(path + ": wrong magic number " + std::to_string(magic) + " (expected " +
                    std::to_string(expected_magic) + " for an IDX " + what + " file)");
  }
  std::vector<uint64_t> shape;
  for (size_t i = 0; i < dims; ++i) shape.push_back(BigEndian32(data, 4 * (1 + i)));
  return shape;
}

void CheckSize(const std::string& path, const std::string& data, uint64_t expected,
               const char* what) {
  if (data.size() == expected) return;
  throw DataError(path + (data.size() < expected ? ": truncated IDX " : ": oversized IDX ") + what +
                  " file: expected " + std::to_string(expected) + " bytes from its header, found " +
                  std::to_string(data.size()));
}

}  // namespace

ImageSet ReadIdxPair(const std::string& images_path, const std::string& labels_path) {
  const std::string images = detail::ReadFileBytes(images_path);
  const auto ishape = ReadHeader(images_path, images, kImagesMagic, 3, "image");
  const uint64_t n = ishape[0], rows = ishape[1], cols = ishape[2];
  if (n == 0 || rows == 0 || cols == 0) {
    throw DataError(images_path + ": empty IDX image file (header says " + std::to_string(n) + "x" +
                    std::to_string(rows) + "x" + std::to_string(cols) + ")");
  }
  uint64_t pixels = 0, expected = 0;
  if (__builtin_mul_overflow(rows, cols, &pixels) || __builtin_mul_overflow(n, pixels, &expected) ||
      __builtin_add_overflow(expected, uint64_t{16}, &expected)) {
    throw DataError(images_path + ": impossible IDX header (" + std::to_string(n) + "x" +
                    std::to_string(rows) + "x" + std::to_string(cols) + " overflows)");
  }
  CheckSize(images_path, images, expected, "image");

  const std::string labels = detail::ReadFileBytes(labels_path);
  const uint64_t nl = ReadHeader(labels_path, labels, kLabelsMagic, 1, "label")[0];
  if (nl != n) {
    throw DataError(labels_path + ": has " + std::to_string(nl) + " labels but " + images_path +
                    " has " + std::to_string(n) + " images (counts differ)");
  }
  CheckSize(labels_path, labels, 8 + nl, "label");

  ImageSet set;
  set.num_classes = kIdxClasses;
  const auto N = static_cast<int64_t>(n);
  set.images = torch::empty({N, 1, static_cast<int64_t>(rows), static_cast<int64_t>(cols)},
                            torch::kUInt8);
  std::memcpy(set.images.data_ptr<uint8_t>(), images.data() + 16, n * pixels);
  set.labels = torch::empty({N}, torch::kInt64);
  auto* out = set.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < N; ++i) {
    const auto value = static_cast<unsigned char>(labels[8 + i]);
    if (value >= kIdxClasses) {
      throw DataError(labels_path + ": label out of range at index " + std::to_string(i) + ": " +
                      std::to_string(value) + " (expected 0 <= label < " +
                      std::to_string(kIdxClasses) + ")");
    }
    out[i] = value;
  }
  return set;
}

}  // namespace ddpbench
