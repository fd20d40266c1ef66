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
// When process `pid` started, in clock ticks since boot (the 22nd field of
// /proc/PID/stat); 0 when there is no such process.
uint64_t ProcessStartTicks(int pid);
// Whether process `pid` (> 0) is gone: no such process, a zombie (exited, not
// yet reaped), or the pid now held by another process (its start time is not
// `start_ticks`; 0: not compared). 0 or less: not known, false.
bool ProcessExited(int pid, uint64_t start_ticks = 0);

}  // namespace ddpbench::shm
