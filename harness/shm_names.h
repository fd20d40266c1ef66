// The names of ddpbench's shared-memory segments in /dev/shm, kept apart from
// the backend so that the launcher (which maps none) can sweep them: every
// name carries the pid of the rank that created it, so whatever killed a rank
// at whatever moment, its parent can unlink what it left once it is gone.
#pragma once

#include <string>
#include <vector>

namespace ddpbench {

// "/ddpbench-PID-GROUP-NONCE": a new segment's name for this process.
std::string SegmentName(const std::string& group);

// Unlinks every segment in /dev/shm that one of `pids` created (call once they
// have all exited: a live rank's segments are in use); returns how many.
int UnlinkSegmentsOf(const std::vector<int>& pids);

}  // namespace ddpbench
