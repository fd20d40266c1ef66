// See gpu_decode.h. Built with DDPBENCH_WITH_NVJPEG (set by CMake on this
// file alone when it finds nvjpeg.h and libnvjpeg and LibTorch has CUDA);
// without it every entry point says the build has no nvJPEG.
#include "datasets/gpu_decode.h"

#include <fmt/format.h>

#include <stdexcept>

#ifdef DDPBENCH_WITH_NVJPEG
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nvjpeg.h>
#include <torch/cuda.h>
#include <torch/nn/functional/upsampling.h>
#endif

namespace ddpbench {

bool LooksLikeWholeJpeg(const std::string& bytes) {
  auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  if (bytes.size() < 4 || at(0) != 0xFF || at(1) != 0xD8) return false;
  // Some writers pad after the end marker: look for it among the last bytes.
  constexpr size_t kTail = 32;
  const size_t stop = bytes.size() > kTail + 2 ? bytes.size() - kTail : 2;
  for (size_t i = bytes.size() - 1; i > stop; --i)
    if (at(i - 1) == 0xFF && at(i) == 0xD9) return true;
  return false;
}

#ifdef DDPBENCH_WITH_NVJPEG

namespace {

void Check(nvjpegStatus_t status, const char* call) {
  if (status != NVJPEG_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("--decode=gpu: nvJPEG's {} failed (status {})", call, static_cast<int>(status)));
}

// nvJPEG's planar RGB output pointing into a uint8 [3, h, w] device tensor.
nvjpegImage_t PlanarRgb(torch::Tensor& chw) {
  nvjpegImage_t image{};
  const int64_t h = chw.size(1), w = chw.size(2);
  for (int c = 0; c < 3; ++c) {
    image.channel[c] = chw.data_ptr<uint8_t>() + c * h * w;
    image.pitch[c] = static_cast<size_t>(w);
  }
  return image;
}

// A uint8 [3, h, w] crop resized to size x size as torchvision's tensor path
// does it on a GPU (float, antialiased bilinear, rounded back), mirrored on `flip`.
torch::Tensor ResizeCrop(const torch::Tensor& crop, int64_t size, bool flip) {
  namespace F = torch::nn::functional;
  torch::Tensor x = F::interpolate(crop.unsqueeze(0).to(torch::kFloat), F::InterpolateFuncOptions()
                                                                           .size(std::vector<int64_t>{size, size})
                                                                           .mode(torch::kBilinear)
                                                                           .align_corners(false)
                                                                           .antialias(true));
  if (flip) x = x.flip({3});
  return x.round_().clamp_(0, 255).to(torch::kUInt8).squeeze(0);
}

}  // namespace

bool GpuDecodeBuilt() { return true; }

// What one image of a batch needs once nvJPEG has accepted it.
struct Accepted {
  int64_t index = 0;     // in the batch
  torch::Tensor pixels;  // uint8 [3, h, w]: the box, or the whole image when the ROI was refused
  bool whole = false;    // pixels hold the whole image: crop to the box afterwards
};

struct GpuJpegDecoder::Impl {
  int device = 0;
  c10::cuda::CUDAStream stream;
  nvjpegHandle_t handle = nullptr;
  bool hardware = false;
  nvjpegJpegState_t state = nullptr;
  nvjpegJpegStream_t parsed = nullptr;
  std::vector<nvjpegDecodeParams_t> params;  // one per image of the largest batch so far
  // The default backend's decoupled decoder: one image at a time, its host
  // stage writing into two pinned buffers in turn.
  nvjpegJpegDecoder_t decoder = nullptr;
  nvjpegBufferDevice_t device_buffer = nullptr;
  nvjpegBufferPinned_t pinned[2] = {nullptr, nullptr};
  cudaEvent_t pinned_free[2] = {nullptr, nullptr};
  int turn = 0;  // the pinned buffer the next image's host stage writes

  explicit Impl(int index) : device(index), stream(c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(index))) {
    hardware = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &handle) == NVJPEG_STATUS_SUCCESS;
    if (!hardware) Check(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &handle), "nvjpegCreateEx");
    Check(nvjpegJpegStreamCreate(handle, &parsed), "nvjpegJpegStreamCreate");
    if (hardware) {
      Check(nvjpegJpegStateCreate(handle, &state), "nvjpegJpegStateCreate");
      return;
    }
    Check(nvjpegDecoderCreate(handle, NVJPEG_BACKEND_DEFAULT, &decoder), "nvjpegDecoderCreate");
    Check(nvjpegDecoderStateCreate(handle, decoder, &state), "nvjpegDecoderStateCreate");
    Check(nvjpegBufferDeviceCreate(handle, nullptr, &device_buffer), "nvjpegBufferDeviceCreate");
    Check(nvjpegStateAttachDeviceBuffer(state, device_buffer), "nvjpegStateAttachDeviceBuffer");
    for (int i = 0; i < 2; ++i) {
      Check(nvjpegBufferPinnedCreate(handle, nullptr, &pinned[i]), "nvjpegBufferPinnedCreate");
      if (cudaEventCreateWithFlags(&pinned_free[i], cudaEventDisableTiming) != cudaSuccess)
        throw std::runtime_error("--decode=gpu: cudaEventCreate failed");
    }
  }

  ~Impl() {  // errors ignored: nothing can be done about them here
    for (nvjpegDecodeParams_t p : params) nvjpegDecodeParamsDestroy(p);
    for (int i = 0; i < 2; ++i) {
      if (pinned_free[i]) cudaEventDestroy(pinned_free[i]);
      if (pinned[i]) nvjpegBufferPinnedDestroy(pinned[i]);
    }
    if (state) nvjpegJpegStateDestroy(state);
    if (device_buffer) nvjpegBufferDeviceDestroy(device_buffer);
    if (decoder) nvjpegDecoderDestroy(decoder);
    if (parsed) nvjpegJpegStreamDestroy(parsed);
    if (handle) nvjpegDestroy(handle);
  }

  nvjpegDecodeParams_t ParamsFor(size_t i) {
    while (params.size() <= i) {
      nvjpegDecodeParams_t p = nullptr;
      Check(nvjpegDecodeParamsCreate(handle, &p), "nvjpegDecodeParamsCreate");
      params.push_back(p);
    }
    Check(nvjpegDecodeParamsSetOutputFormat(params[i], NVJPEG_OUTPUT_RGB), "nvjpegDecodeParamsSetOutputFormat");
    return params[i];
  }

  // Parses `bytes` into `parsed`; false for what nvJPEG or this decoder
  // leaves to the CPU (unparseable, CMYK and other than 1 or 3 components).
  bool Parse(const std::string& bytes, bool whole_stream) {
    if (!LooksLikeWholeJpeg(bytes)) return false;
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    const nvjpegStatus_t s = whole_stream ? nvjpegJpegStreamParse(handle, data, bytes.size(), 0, 0, parsed)
                                          : nvjpegJpegStreamParseHeader(handle, data, bytes.size(), parsed);
    unsigned int components = 0;
    return s == NVJPEG_STATUS_SUCCESS &&
           nvjpegJpegStreamGetComponentsNum(parsed, &components) == NVJPEG_STATUS_SUCCESS &&
           (components == 1 || components == 3);
  }

  // Sets params' ROI to the box (or the whole image) and asks whether the
  // hardware engine takes the image so.
  bool EngineTakes(nvjpegDecodeParams_t p, const CropBox& box, bool roi) {
    if (roi) {
      Check(nvjpegDecodeParamsSetROI(p, static_cast<int>(box.left), static_cast<int>(box.top),
                                     static_cast<int>(box.width), static_cast<int>(box.height)),
            "nvjpegDecodeParamsSetROI");
    } else {
      Check(nvjpegDecodeParamsSetROI(p, 0, 0, -1, -1), "nvjpegDecodeParamsSetROI");
    }
    int unsupported = 1;
    return nvjpegDecodeBatchedSupportedEx(handle, parsed, p, &unsupported) == NVJPEG_STATUS_SUCCESS && unsupported == 0;
  }

  torch::Tensor DeviceImage(int64_t height, int64_t width) const {
    return torch::empty({3, height, width}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA, device));
  }

  // The hardware engine: every image it takes, in one batched call (with
  // its box as the ROI, else whole); an empty list if the call fails.
  std::vector<Accepted> DecodeOnEngine(const std::vector<GpuDecodeJob>& jobs) {
    std::vector<Accepted> taken;
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> outputs;
    std::vector<nvjpegDecodeParams_t> chosen;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const GpuDecodeJob& job = jobs[i];
      if (!Parse(*job.bytes, /*whole_stream=*/false)) continue;
      nvjpegDecodeParams_t p = ParamsFor(taken.size());
      Accepted a;
      a.index = static_cast<int64_t>(i);
      if (EngineTakes(p, job.box, /*roi=*/true)) {
        a.pixels = DeviceImage(job.box.height, job.box.width);
      } else if (EngineTakes(p, job.box, /*roi=*/false)) {
        unsigned int w = 0, h = 0;
        Check(nvjpegJpegStreamGetFrameDimensions(parsed, &w, &h), "nvjpegJpegStreamGetFrameDimensions");
        a.pixels = DeviceImage(h, w);
        a.whole = true;
      } else {
        continue;
      }
      data.push_back(reinterpret_cast<const unsigned char*>(job.bytes->data()));
      lengths.push_back(job.bytes->size());
      outputs.push_back(PlanarRgb(a.pixels));
      chosen.push_back(p);
      taken.push_back(std::move(a));
    }
    if (taken.empty()) return taken;
    const int n = static_cast<int>(taken.size());
    if (nvjpegDecodeBatchedInitialize(handle, state, n, 1, NVJPEG_OUTPUT_RGB) != NVJPEG_STATUS_SUCCESS ||
        nvjpegDecodeBatchedEx(handle, state, data.data(), lengths.data(), outputs.data(), chosen.data(),
                              stream.stream()) != NVJPEG_STATUS_SUCCESS)
      return {};
    return taken;
  }

  // nvJPEG's default backend: image by image, each over its box.
  std::vector<Accepted> DecodeEachHybrid(const std::vector<GpuDecodeJob>& jobs) {
    std::vector<Accepted> taken;
    nvjpegDecodeParams_t p = ParamsFor(0);
    for (size_t i = 0; i < jobs.size(); ++i) {
      const GpuDecodeJob& job = jobs[i];
      if (!Parse(*job.bytes, /*whole_stream=*/true)) continue;
      Check(nvjpegDecodeParamsSetROI(p, static_cast<int>(job.box.left), static_cast<int>(job.box.top),
                                     static_cast<int>(job.box.width), static_cast<int>(job.box.height)),
            "nvjpegDecodeParamsSetROI");
      int unsupported = 1;
      if (nvjpegDecoderJpegSupported(decoder, parsed, p, &unsupported) != NVJPEG_STATUS_SUCCESS || unsupported != 0)
        continue;
      Accepted a{static_cast<int64_t>(i), DeviceImage(job.box.height, job.box.width)};
      if (DecodeOneHybrid(p, a.pixels)) taken.push_back(std::move(a));
    }
    return taken;
  }

  // One image through the decoupled stages: host (Huffman), transfer, device.
  bool DecodeOneHybrid(nvjpegDecodeParams_t p, torch::Tensor& out) {
    turn = 1 - turn;
    // The pinned buffer is rewritten by the host stage: wait for its last transfer.
    cudaEventSynchronize(pinned_free[turn]);
    nvjpegImage_t image = PlanarRgb(out);
    const bool ok =
        nvjpegStateAttachPinnedBuffer(state, pinned[turn]) == NVJPEG_STATUS_SUCCESS &&
        nvjpegDecodeJpegHost(handle, decoder, state, p, parsed) == NVJPEG_STATUS_SUCCESS &&
        nvjpegDecodeJpegTransferToDevice(handle, decoder, state, parsed, stream.stream()) == NVJPEG_STATUS_SUCCESS &&
        nvjpegDecodeJpegDevice(handle, decoder, state, &image, stream.stream()) == NVJPEG_STATUS_SUCCESS;
    cudaEventRecord(pinned_free[turn], stream.stream());
    return ok;
  }
};

GpuJpegDecoder::GpuJpegDecoder(int device) {
  if (!torch::cuda::is_available() || device < 0 || device >= static_cast<int>(torch::cuda::device_count()))
    throw std::runtime_error(fmt::format("--decode=gpu: no CUDA device {} here", device));
  c10::cuda::CUDAGuard on_device(static_cast<c10::DeviceIndex>(device));
  impl_ = std::make_unique<Impl>(device);
}

GpuJpegDecoder::~GpuJpegDecoder() = default;

std::string GpuJpegDecoder::Backend() const { return impl_->hardware ? "hardware" : "hybrid"; }

torch::Tensor GpuJpegDecoder::Decode(const std::vector<GpuDecodeJob>& jobs, int64_t size, const CpuFallback& fallback) {
  Impl& d = *impl_;
  c10::cuda::CUDAGuard on_device(static_cast<c10::DeviceIndex>(d.device));
  c10::cuda::CUDAStreamGuard on_stream(d.stream);
  const auto n = static_cast<int64_t>(jobs.size());
  torch::Tensor out = torch::empty({n, 3, size, size}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA, d.device));
  const std::vector<Accepted> taken = d.hardware ? d.DecodeOnEngine(jobs) : d.DecodeEachHybrid(jobs);
  std::vector<bool> done(static_cast<size_t>(n), false);
  for (const Accepted& a : taken) {
    const CropBox& box = jobs[static_cast<size_t>(a.index)].box;
    const torch::Tensor crop = a.whole ? a.pixels.narrow(1, box.top, box.height).narrow(2, box.left, box.width) : a.pixels;
    out[a.index].copy_(ResizeCrop(crop, size, jobs[static_cast<size_t>(a.index)].flip));
    done[static_cast<size_t>(a.index)] = true;
  }
  std::vector<int64_t> refused;
  for (int64_t i = 0; i < n; ++i)
    if (!done[static_cast<size_t>(i)]) refused.push_back(i);
  if (!refused.empty()) {
    const torch::Tensor host = fallback(refused);
    out.index_copy_(0, torch::tensor(refused, torch::kLong).to(out.device()), host.to(out.device()));
  }
  d.stream.synchronize();
  return out;
}

#else  // built without nvJPEG

namespace {
const char* const kNoNvjpeg =
    "--decode=gpu: this binary was built without nvJPEG (CMake found no nvjpeg.h and libnvjpeg beside LibTorch's "
    "CUDA, see docs/imagefolder.md); accepted: --decode=cpu";
}

bool GpuDecodeBuilt() { return false; }
struct GpuJpegDecoder::Impl {};
GpuJpegDecoder::GpuJpegDecoder(int) { throw std::runtime_error(kNoNvjpeg); }
GpuJpegDecoder::~GpuJpegDecoder() = default;
std::string GpuJpegDecoder::Backend() const { return ""; }
torch::Tensor GpuJpegDecoder::Decode(const std::vector<GpuDecodeJob>&, int64_t, const CpuFallback&) {
  throw std::runtime_error(kNoNvjpeg);
}

#endif

}  // namespace ddpbench
