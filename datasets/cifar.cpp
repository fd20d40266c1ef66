// CIFAR-10 / CIFAR-100 "binary version" reader
// (https://www.cs.toronto.edu/~kriz/cifar.html). Each record is the label
// byte(s) then 3072 pixel bytes already in C,H,W order (1024 red, 1024 green,
// 1024 blue, each row-major 32x32), so a record's pixels are copied as they
// are. Sizes and labels are checked so that a wrong or partial file fails with
// its name instead of silently shifting every following record.
#include "datasets/internal.h"

#include <torch/torch.h>

#include <cstring>

namespace ddpbench {
namespace {

constexpr int64_t kSide = 32, kChannels = 3, kPixels = kChannels * kSide * kSide;  // 3072

}  // namespace

ImageSet ReadCifarFiles(const std::vector<std::string>& paths, bool cifar100) {
  if (paths.empty()) throw DataError("ReadCifarFiles: no CIFAR files given");
  const int64_t label_bytes = cifar100 ? 2 : 1;  // CIFAR-100: coarse label, then fine label
  const int64_t record = label_bytes + kPixels;
  const int64_t classes = cifar100 ? 100 : 10;
  const char* kind = cifar100 ? "CIFAR-100" : "CIFAR-10";

  std::vector<std::string> contents;
  int64_t total = 0;
  for (const auto& path : paths) {
    std::string data = detail::ReadFileBytes(path);
    const auto size = static_cast<int64_t>(data.size());
    if (size == 0 || size % record != 0) {
      throw DataError(path + ": wrong size for a " + kind + " binary file: " + std::to_string(size) +
                      " bytes is not a (non-zero) multiple of the record size " +
                      std::to_string(record) + " (" + std::to_string(label_bytes) +
                      " label byte(s) + 3072 pixels)");
    }
    total += size / record;
    contents.push_back(std::move(data));
  }

  ImageSet set;
  set.num_classes = classes;
  set.images = torch::empty({total, kChannels, kSide, kSide}, torch::kUInt8);
  set.labels = torch::empty({total}, torch::kInt64);
  auto* pixels = set.images.data_ptr<uint8_t>();
  auto* labels = set.labels.data_ptr<int64_t>();
  int64_t row = 0;
  for (size_t f = 0; f < contents.size(); ++f) {
    const std::string& data = contents[f];
    const int64_t records = static_cast<int64_t>(data.size()) / record;
    for (int64_t i = 0; i < records; ++i, ++row) {
      const char* rec = data.data() + i * record;
      if (cifar100) {
        const auto coarse = static_cast<unsigned char>(rec[0]);
        if (coarse >= 20) {
          throw DataError(paths[f] + ": coarse label out of range in record " + std::to_string(i) +
                          ": " + std::to_string(coarse) + " (expected 0 <= label < 20)");
        }
      }
      const auto label = static_cast<unsigned char>(rec[label_bytes - 1]);
      if (label >= classes) {
        throw DataError(paths[f] + ": label out of range in record " + std::to_string(i) + ": " +
                        std::to_string(label) + " (expected 0 <= label < " +
                        std::to_string(classes) + ")");
      }
      labels[row] = label;
      std::memcpy(pixels + row * kPixels, rec + label_bytes, kPixels);
    }
  }
  return set;
}

}  // namespace ddpbench
