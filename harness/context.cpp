#include "harness/context.h"

#include <torch/version.h>
#include <unistd.h>

#include <ctime>
#include <fstream>

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
  }
  return env;
}

}  // namespace ddpbench
