// The standard ImageNet transforms of the ImageFolder source, as torchvision
// defines them: for training RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3)
// and a horizontal flip; for evaluation a resize of the shorter side to
// size / 0.875 and a centre crop. Every random choice is drawn from one key,
// a hash of (seed, epoch, sample index), so a sample's crop is the same on
// every run, on whichever rank it lands, and after a resume. Output is uint8
// [3, size, size]; NormaliseImageNetOnHost turns a batch of them into floats.
#pragma once

#include "datasets/dataset.h"
#include "datasets/image_decode.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace ddpbench {

// torchvision's RandomResizedCrop.get_params on an image of height x width
// (ten tries of a random area and log-uniform aspect ratio, then the central
// fallback), with its uniform draws taken from `key`. The one crop sampler:
// drawn from the header's size before decoding, whichever decoder runs.
CropBox RandomResizedCropBox(int64_t height, int64_t width, uint64_t key);
// Whether the training crop drawn from `key` is flipped.
bool FlipOf(uint64_t key);

// What torchvision's Resize(int(size / 0.875)) then CenterCrop(size) keep of
// a height x width image, as a box of the full-size image.
CropBox EvalCropBox(int64_t height, int64_t width, int64_t size);

// The box (full-size pixels) of `image` (decoded at 1/image.scale_denom,
// whole or the region around the box) resized to size x size by antialiased bilinear interpolation (what
// torchvision's tensor and PIL paths do), mirrored when `flip`: uint8
// [3, size, size] (a view of the resized channels-last image).
torch::Tensor CropResize(const RgbImage& image, CropBox box, int64_t size, bool flip);

// One training (random crop + flip) or evaluation (resize + centre crop)
// sample from a file's bytes: the crop chosen from the header, then only its
// region decoded, at the coarsest DCT scale the crop allows.
// `mark`, when given, is called as the header, decode and resize stages end
// (a loader's per-stage clock).
using StageMark = std::function<void(LoadStage)>;
torch::Tensor TrainSample(const std::string& path, const std::string& bytes, int64_t size, uint64_t key,
                          const StageMark& mark = nullptr);
torch::Tensor EvalSample(const std::string& path, const std::string& bytes, int64_t size,
                         const StageMark& mark = nullptr);

// ImageNet's normalisation, (x / 255 - mean) / std per channel.
extern const std::vector<double> kImageNetMean, kImageNetStd;
// A uint8 [N, 3, H, W] host batch normalised into float in one pass through
// a table of each channel's 256 values, the table computed by the tensor
// operations images.to(float).div_(255).sub_(mean).div_(std), so the result
// is theirs bit for bit, without their four passes over a float batch;
// channels-last strides when `channels_last`. Written into `out` when given
// (a float tensor of the batch's sizes and that memory format, e.g. from a
// BatchPool), else into a new tensor.
torch::Tensor NormaliseImageNetOnHost(const torch::Tensor& images, bool channels_last, torch::Tensor out = {});

}  // namespace ddpbench
