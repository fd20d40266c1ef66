// The context block every row carries (as google/benchmark's reports do):
// when, where, which code and which library versions produced a figure.
#pragma once
#include <string>

namespace ddpbench {

extern const char* kGitSha;  // generated at build time (scripts/build_info.cmake)

struct RunEnvironment {
  std::string timestamp;      // UTC, ISO 8601
  std::string host;
  std::string cpu_model;
  std::string torch_version;
  std::string cuda_version;   // CUDA runtime, "" without a GPU run
  std::string nccl_version;
  std::string driver_version;  // NVIDIA kernel driver ("580.65.06"), "" without one
  std::string cpu_isa;         // the instruction set ATen's CPU kernels dispatch to: avx512, avx2, default
  std::string machine_id;      // "cpu-" + a hash of the CPU's identity (MachineIdentity)
};
RunEnvironment DescribeEnvironment(bool cuda);
std::string UtcTimestamp();
std::string ParseNvidiaDriverVersion(const std::string& line);  // "" if the line names none
// A stable 12-hex-digit hash of what makes two machines run kernels alike: the
// CPU's vendor, family, model, stepping, model name and flags from
// /proc/cpuinfo's first processor, and the online core count. Two VMs with
// one host name but other CPUs (AVX-512 against AVX2-only) differ; two
// machines of one kind agree, so a nightly history can span them.
std::string MachineIdentity(const std::string& cpuinfo, long cores);

}  // namespace ddpbench
