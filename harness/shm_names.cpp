// Segment names and the launcher's sweep (shm_names.h).
#include "harness/shm_names.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <random>

namespace ddpbench {

std::string SegmentName(const std::string& group) {
  std::random_device device;
  const uint64_t nonce = (static_cast<uint64_t>(device()) << 32) ^ device();
  std::string clean;
  for (char c : group) clean += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return fmt::format("/ddpbench-{}-{}-{:016x}", ::getpid(), clean.substr(0, 64), nonce);
}

int UnlinkSegmentsOf(const std::vector<int>& pids) {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    for (int pid : pids)
      if (pid > 0 && name.rfind(fmt::format("ddpbench-{}-", pid), 0) == 0) names.push_back("/" + name);
  }
  ::closedir(dir);
  int unlinked = 0;
  for (const auto& name : names) unlinked += ::shm_unlink(name.c_str()) == 0;
  return unlinked;
}

}  // namespace ddpbench
