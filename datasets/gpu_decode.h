// GPU decode (--decode=gpu): a batch of JPEGs decoded on a CUDA device by
// nvJPEG, each only over the crop the host drew from its header (nvJPEG's
// region of interest), then resized to the output size and flipped there.
// The GPU's JPEG engine (nvJPEG's hardware backend) decodes the batch in one
// call where the device has one; elsewhere nvJPEG's default (hybrid) backend
// decodes image by image. What nvJPEG refuses (PNG, progressive JPEGs on the
// engine, CMYK, corrupt or cut-short data) is handed back to the caller, who
// decodes it on the CPU as without this flag. Only gpu_decode.cpp includes
// nvjpeg.h; a build without it still links, and says so when asked to decode.
#pragma once

#include "datasets/image_decode.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddpbench {

// Whether this binary was built with nvJPEG (CMake found nvjpeg.h and
// libnvjpeg, and LibTorch has CUDA).
bool GpuDecodeBuilt();

// One image of a batch: its file's bytes, the crop (full-size pixels) and
// whether the crop is mirrored.
struct GpuDecodeJob {
  const std::string* bytes = nullptr;
  CropBox box;
  bool flip = false;
};

// The samples nvJPEG refused, by their index in the batch, made on the CPU:
// uint8 [refused.size(), 3, size, size] on the host.
using CpuFallback = std::function<torch::Tensor(const std::vector<int64_t>& refused)>;

class GpuJpegDecoder {
 public:
  // On CUDA device `device`; throws std::runtime_error naming what is
  // missing (a build without nvJPEG, no such device, nvJPEG failing to start).
  explicit GpuJpegDecoder(int device);
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;

  // "hardware" (the JPEG engine, batched) or "hybrid" (nvJPEG's default backend).
  std::string Backend() const;

  // uint8 [N, 3, size, size] on the device: each job's box decoded, resized
  // by antialiased bilinear interpolation (rounded back to uint8, as
  // torchvision's tensor path does) and flipped; the rows nvJPEG refused are
  // the fallback's. Runs on the decoder's own stream and waits for it, so
  // the batch is complete on return. Not for two threads at once.
  torch::Tensor Decode(const std::vector<GpuDecodeJob>& jobs, int64_t size, const CpuFallback& fallback);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether `bytes` could be a whole baseline-or-progressive JPEG: it starts
// with the SOI marker and its last bytes hold the EOI marker. A file cut
// short fails this and goes to the CPU decoder, which names it.
bool LooksLikeWholeJpeg(const std::string& bytes);

}  // namespace ddpbench
