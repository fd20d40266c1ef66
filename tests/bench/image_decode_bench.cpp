// Google Benchmark: a training sample's JPEG decode, whole image against the
// region of interest (only the rows and iMCU columns holding the
// RandomResizedCrop box), both at the DCT scale the crop allows, over the
// JPEGs of the folder $DDPBENCH_BENCH_IMAGES (e.g. a class folder written by
// scripts/make_imagefolder.py; skipped without it). items/s is images/s on
// one thread. Run with --benchmark_enable_random_interleaving=true so a busy
// minute hits both alike.
#include <benchmark/benchmark.h>

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "datasets/image_decode.h"
#include "datasets/image_transforms.h"
#include "datasets/internal.h"

namespace ddpbench {
namespace {

// Every .jpg of the folder, read once.
const std::vector<std::string>& Images() {
  static const std::vector<std::string> images = [] {
    std::vector<std::string> out;
    const char* dir = std::getenv("DDPBENCH_BENCH_IMAGES");
    DIR* d = dir ? ::opendir(dir) : nullptr;
    if (!d) return out;
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".jpg") == 0) names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) out.push_back(detail::ReadFileBytes(std::string(dir) + "/" + name));
    return out;
  }();
  return images;
}

void BM_TrainDecode(benchmark::State& state, bool region) {
  const auto& images = Images();
  if (images.empty()) {
    state.SkipWithError("set DDPBENCH_BENCH_IMAGES to a folder of .jpg files");
    return;
  }
  constexpr int64_t kSize = 224;
  uint64_t key = 0;
  for (auto _ : state) {
    const std::string& bytes = images[key % images.size()];
    const RgbImage image = DecodeImageFor("bench.jpg", bytes, [&](int64_t height, int64_t width) {
      const CropBox box = RandomResizedCropBox(height, width, key);
      const int denom = ScaleDenomFor(static_cast<double>(box.height), static_cast<double>(box.width), kSize, kSize);
      return DecodeRequest{denom, region ? box : CropBox{}};
    });
    benchmark::DoNotOptimize(image.pixels.data());
    ++key;
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_CAPTURE(BM_TrainDecode, whole, false)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_TrainDecode, region, true)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace ddpbench
