// See mfu.h. Figures: NVIDIA's data sheets (dense tensor-core peaks; the SXM
// parts unless the name says PCIe). Longer names first, so "H100 PCIe" is
// not read as the SXM "H100".
#include "harness/mfu.h"

namespace ddpbench {
namespace {

struct DevicePeak {
  const char* name_part;
  double half_tflops;  // bf16/fp16 tensor cores (V100: fp16 only)
  double tf32_tflops;  // 0: no TF32
  double fp32_tflops;  // CUDA cores
};

constexpr DevicePeak kPeaks[] = {
    {"H100 PCIe", 756.0, 378.0, 51.2},  {"H100 NVL", 835.0, 417.5, 60.0},
    {"H100", 989.4, 494.7, 66.9},       {"H200", 989.4, 494.7, 66.9},
    {"GH200", 989.4, 494.7, 66.9},      {"B200", 2250.0, 1100.0, 80.0},
    {"A100", 312.0, 156.0, 19.5},       {"A10G", 70.0, 35.0, 31.2},
    {"A10", 125.0, 62.5, 31.2},         {"L40S", 362.1, 183.0, 91.6},
    {"L4", 121.0, 60.0, 30.3},          {"V100", 125.0, 0.0, 15.7},
};

}  // namespace

double PeakFlops(const std::string& device_name, const std::string& amp, const std::string& tf32) {
  for (const auto& p : kPeaks) {
    if (device_name.find(p.name_part) == std::string::npos) continue;
    double tflops = p.fp32_tflops;
    if (amp == "bf16" || amp == "fp16") tflops = (amp == "bf16" && p.tf32_tflops == 0) ? 0 : p.half_tflops;
    else if (tf32 != "off" && p.tf32_tflops > 0) tflops = p.tf32_tflops;
    return tflops * 1e12;
  }
  return 0;
}

}  // namespace ddpbench
