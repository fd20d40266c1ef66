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
};
RunEnvironment DescribeEnvironment(bool cuda);
std::string UtcTimestamp();
std::string ParseNvidiaDriverVersion(const std::string& line);  // "" if the line names none

}  // namespace ddpbench
