// See image_transforms.h. The crop geometry follows torchvision's
// RandomResizedCrop and Resize + CenterCrop; the resize is LibTorch's
// antialiased bilinear interpolation, which has a uint8 channels-last fast
// path, so a sample never goes through float on the host.
#include "datasets/image_transforms.h"

#include "datasets/dataset.h"

#include <torch/nn/functional/upsampling.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace ddpbench {
namespace {

constexpr double kScaleMin = 0.08, kScaleMax = 1.0;
constexpr double kRatioMin = 3.0 / 4.0, kRatioMax = 4.0 / 3.0;
constexpr double kEvalCropFraction = 0.875;

double Uniform(std::mt19937_64& gen, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(gen() >> 11) * 0x1.0p-53;
}
int64_t UniformInt(std::mt19937_64& gen, int64_t lo, int64_t hi) {  // inclusive
  return lo + static_cast<int64_t>(gen() % static_cast<uint64_t>(hi - lo + 1));
}
int64_t Round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }  // Python's round: half to even

}  // namespace

CropBox RandomResizedCropBox(int64_t height, int64_t width, uint64_t key) {
  std::mt19937_64 gen(key);
  const double area = static_cast<double>(height * width);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * Uniform(gen, kScaleMin, kScaleMax);
    const double ratio = std::exp(Uniform(gen, std::log(kRatioMin), std::log(kRatioMax)));
    const int64_t w = Round(std::sqrt(target * ratio)), h = Round(std::sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t top = UniformInt(gen, 0, height - h);
      return {top, UniformInt(gen, 0, width - w), h, w};
    }
  }
  // The central fallback: the largest box within the ratio limits.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < kRatioMin) {
    h = Round(static_cast<double>(w) / kRatioMin);
  } else if (in_ratio > kRatioMax) {
    w = Round(static_cast<double>(h) * kRatioMax);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

bool FlipOf(uint64_t key) { return (key >> 63) & 1; }

CropBox EvalCropBox(int64_t height, int64_t width, int64_t size) {
  const auto resized_short = static_cast<int64_t>(static_cast<double>(size) / kEvalCropFraction);
  const int64_t shorter = std::min(height, width), longer = std::max(height, width);
  const auto resized_long = static_cast<int64_t>(static_cast<double>(resized_short * longer) / shorter);
  const int64_t rh = height <= width ? resized_short : resized_long;
  const int64_t rw = height <= width ? resized_long : resized_short;
  // The centre crop in the resized image, then back to full-size pixels.
  const double sy = static_cast<double>(height) / rh, sx = static_cast<double>(width) / rw;
  const int64_t top = Round((rh - std::min(size, rh)) / 2.0), left = Round((rw - std::min(size, rw)) / 2.0);
  CropBox box{Round(top * sy), Round(left * sx), Round(std::min(size, rh) * sy), Round(std::min(size, rw) * sx)};
  box.height = std::clamp<int64_t>(box.height, 1, height - box.top);
  box.width = std::clamp<int64_t>(box.width, 1, width - box.left);
  return box;
}

torch::Tensor CropResize(const RgbImage& image, CropBox box, int64_t size, bool flip) {
  // The box in the decoded pixels (1/scale_denom of full size, from image.top, image.left).
  const Span rows = ScaledSpan(box.top, box.height, image.scale_denom, image.top + image.height);
  const Span cols = ScaledSpan(box.left, box.width, image.scale_denom, image.left + image.width);
  const torch::Tensor hwc = torch::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3},
                                             torch::kUInt8);
  // [1, 3, h, w] with channels-last strides: a view of the crop, no copy yet.
  torch::Tensor crop = hwc.narrow(0, rows.begin - image.top, rows.end - rows.begin)
                           .narrow(1, cols.begin - image.left, cols.end - cols.begin)
                           .permute({2, 0, 1})
                           .unsqueeze(0);
  crop = crop.contiguous(at::MemoryFormat::ChannelsLast);
  namespace F = torch::nn::functional;
  torch::Tensor out = F::interpolate(crop, F::InterpolateFuncOptions()
                                               .size(std::vector<int64_t>{size, size})
                                               .mode(torch::kBilinear)
                                               .align_corners(false)
                                               .antialias(true));
  if (flip) out = out.flip({3});
  return out.squeeze(0);
}

namespace {

// The crop chosen from the header by `crop_of(height, width)`, its region
// decoded at the coarsest DCT scale it allows, resized (and flipped).
template <typename CropOf>
torch::Tensor Sample(const std::string& path, const std::string& bytes, int64_t size, bool flip, CropOf crop_of,
                     const StageMark& mark) {
  auto end = [&](LoadStage stage) {
    if (mark) mark(stage);
  };
  CropBox box;
  const RgbImage image = DecodeImageFor(path, bytes, [&](int64_t height, int64_t width) {
    end(LoadStage::kHeader);
    box = crop_of(height, width);
    return DecodeRequest{ScaleDenomFor(static_cast<double>(box.height), static_cast<double>(box.width), size, size), box};
  });
  end(LoadStage::kDecode);
  torch::Tensor out = CropResize(image, box, size, flip);
  end(LoadStage::kResize);
  return out;
}

}  // namespace

torch::Tensor TrainSample(const std::string& path, const std::string& bytes, int64_t size, uint64_t key,
                          const StageMark& mark) {
  return Sample(
      path, bytes, size, FlipOf(key),
      [key](int64_t height, int64_t width) { return RandomResizedCropBox(height, width, key); }, mark);
}

torch::Tensor EvalSample(const std::string& path, const std::string& bytes, int64_t size, const StageMark& mark) {
  return Sample(
      path, bytes, size, /*flip=*/false,
      [size](int64_t height, int64_t width) { return EvalCropBox(height, width, size); }, mark);
}

const std::vector<double> kImageNetMean = {0.485, 0.456, 0.406}, kImageNetStd = {0.229, 0.224, 0.225};

torch::Tensor NormaliseImageNetOnHost(const torch::Tensor& images, bool channels_last, torch::Tensor out) {
  static const torch::Tensor table =  // [3, 256]
      torch::arange(256, torch::kFloat)
          .view({1, 1, 1, 256})
          .repeat({1, 3, 1, 1})
          .div_(255.0)
          .sub_(torch::tensor(kImageNetMean, torch::kFloat).view({1, 3, 1, 1}))
          .div_(torch::tensor(kImageNetStd, torch::kFloat).view({1, 3, 1, 1}))
          .contiguous();
  TORCH_CHECK(images.dim() == 4 && images.size(1) == 3 && images.scalar_type() == torch::kUInt8 && images.is_cpu(),
              "NormaliseImageNetOnHost: wants a uint8 [N, 3, H, W] host batch, got ", images.sizes());
  const int64_t n = images.size(0), hw = images.size(2) * images.size(3);
  const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  if (!out.defined()) out = torch::empty(images.sizes(), torch::TensorOptions().dtype(torch::kFloat).memory_format(format));
  TORCH_CHECK(out.sizes() == images.sizes() && out.scalar_type() == torch::kFloat && out.is_contiguous(format),
              "NormaliseImageNetOnHost: `out` is not a float tensor of ", images.sizes(), " in the batch's memory format");
  const torch::Tensor src_tensor = images.contiguous();
  const uint8_t* src = src_tensor.data_ptr<uint8_t>();
  const float* values = table.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t step = channels_last ? 3 : 1;  // between a channel's neighbouring pixels
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < 3; ++c) {
      const uint8_t* from = src + (i * 3 + c) * hw;
      const float* t = values + c * 256;
      float* to = dst + (channels_last ? i * 3 * hw + c : (i * 3 + c) * hw);
      for (int64_t k = 0; k < hw; ++k) to[k * step] = t[from[k]];
    }
  return out;
}

}  // namespace ddpbench
