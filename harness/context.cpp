#include "harness/context.h"

#include <torch/version.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <fstream>
#include <sstream>

#include "harness/cuda_support.h"

namespace ddpbench {

std::string UtcTimestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The NVIDIA kernel module's version from the first line of
// /proc/driver/nvidia/version: the first dotted number after "Kernel Module"
// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  ..." or, for
// the open module, "... UNIX Open Kernel Module for x86_64  580.159.04 ...");
// "" when there is none.
std::string ParseNvidiaDriverVersion(const std::string& line) {
  const std::string marker = "Kernel Module";
  const auto pos = line.find(marker);
  if (pos == std::string::npos) return "";
  std::istringstream rest(line.substr(pos + marker.size()));
  for (std::string token; rest >> token;) {
    const bool dotted = token.find('.') != std::string::npos &&
                        token.find_first_not_of("0123456789.") == std::string::npos && std::isdigit(token[0]);
    if (dotted) return token;
  }
  return "";
}

std::string NvidiaDriverVersion() {
  std::ifstream file("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(file, line)) return "";
  return ParseNvidiaDriverVersion(line);
}

RunEnvironment DescribeEnvironment(bool cuda) {
  RunEnvironment env;
  env.timestamp = UtcTimestamp();
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) env.host = host;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) env.cpu_model = line.substr(pos + 2);
      break;
    }
  }
  env.torch_version = TORCH_VERSION;
  if (cuda) {
    env.cuda_version = CudaRuntimeVersion();
    env.nccl_version = NcclVersion();
    env.driver_version = NvidiaDriverVersion();
  }
  return env;
}

}  // namespace ddpbench
