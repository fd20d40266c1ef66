// --profile=FILE.json: PyTorch's own profiler (Kineto) over the timed steps.
// --trace shows ddpbench's phases and collectives; this shows what ran
// underneath them: every ATen operator on the host and, on CUDA, every
// kernel and copy (CUPTI), in the Chrome trace format that Perfetto,
// TensorBoard and scripts/profile_breakdown.py read. Kept apart so that only
// this file's .cpp includes the profiler's headers.
#pragma once

#include <string>

namespace ddpbench::kineto {

// Starts profiling this process: host operators, and device activity when
// `cuda`. Throws if a profile is already running.
void Start(bool cuda);

// Stops the profile started by Start and writes it to `path`; returns the
// path written. Does nothing (returns "") when none was started.
std::string Finish(const std::string& path);

}  // namespace ddpbench::kineto
