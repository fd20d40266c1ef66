// The row's context block: when, where and on what a run ran (host, CPU, its
// instruction set and identity, library and driver versions), as
// google/benchmark puts a context on every report.
#include "harness/context.h"

#include <ATen/Version.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
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

std::string MachineIdentity(const std::string& cpuinfo, long cores) {
  static const char* kKeys[] = {"vendor_id", "cpu family", "model", "model name", "stepping", "flags"};
  std::istringstream in(cpuinfo);
  std::string identity;
  for (std::string line; std::getline(in, line) && !line.empty();) {  // the first processor's block
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys)) identity += line + "\n";
  }
  identity += "cores " + std::to_string(cores);
  uint64_t hash = 1469598103934665603ull;  // FNV-1a, 64 bits: the same on every build
  for (unsigned char ch : identity) hash = (hash ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return "cpu-" + std::string(hex, 12);
}

RunEnvironment DescribeEnvironment(bool cuda) {
  RunEnvironment env;
  env.timestamp = UtcTimestamp();
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) env.host = host;
  std::stringstream text;  // /proc/cpuinfo, read once: the model's name and the machine's identity
  text << std::ifstream("/proc/cpuinfo").rdbuf();
  std::istringstream cpuinfo(text.str());
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) env.cpu_model = line.substr(pos + 2);
      break;
    }
  }
  env.machine_id = MachineIdentity(text.str(), ::sysconf(_SC_NPROCESSORS_ONLN));
  env.cpu_isa = at::get_cpu_capability();
  std::transform(env.cpu_isa.begin(), env.cpu_isa.end(), env.cpu_isa.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  env.torch_version = TORCH_VERSION;
  if (cuda) {
    env.cuda_version = CudaRuntimeVersion();
    env.nccl_version = NcclVersion();
    env.driver_version = NvidiaDriverVersion();
  }
  return env;
}

}  // namespace ddpbench
