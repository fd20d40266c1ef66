// Pinning a CPU rank to its cores, and the set it had before (cpu_pinning.h).
#include "harness/cpu_pinning.h"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"

namespace ddpbench {

namespace {

std::mutex given_mutex;
bool pinned = false;
cpu_set_t given;

}  // namespace

void PinRankToCores(int local_rank, int threads) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  if (static_cast<int>(cores.size()) < (local_rank + 1) * threads) return;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = 0; i < threads; ++i) CPU_SET(cores[local_rank * threads + i], &mine);
  {
    const std::lock_guard<std::mutex> lock(given_mutex);
    if (!pinned) given = allowed, pinned = true;
  }
  if (sched_setaffinity(0, sizeof(mine), &mine) != 0)
    LogWarn("could not pin rank {} to its cores: {}", local_rank, std::strerror(errno));
}

cpu_set_t CoresBeforePinning() {
  {
    const std::lock_guard<std::mutex> lock(given_mutex);
    if (pinned) return given;
  }
  cpu_set_t now;
  CPU_ZERO(&now);
  sched_getaffinity(0, sizeof(now), &now);
  return now;
}

}  // namespace ddpbench
