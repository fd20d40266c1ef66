// The waiting both shared-memory mechanisms share (the collectives' barrier in
// shm_backend.cpp, the mailboxes in shm_p2p.cpp): a futex word bumped to wake
// every sleeper, a sleep of at most one slice while the word is unchanged (so
// the sleeper can check its peer between slices), and whether a peer process
// has exited.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ddpbench::shm {

constexpr auto kWaitSlice = std::chrono::milliseconds(20);  // how often a sleeper checks its peer

// `word` + 1, and every thread sleeping on it (in any process) woken.
void Bump(std::atomic<uint32_t>& word);
// Sleeps while `word` still holds `seen`, at most kWaitSlice.
void SleepOn(std::atomic<uint32_t>& word, uint32_t seen);
// Whether process `pid` (> 0) is gone; 0 or less: not known, false.
bool ProcessExited(int pid);

}  // namespace ddpbench::shm
