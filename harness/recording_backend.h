// A c10d backend that passes every call to the backend it wraps (Gloo) and
// writes each collective into the flight recorder (flight_recorder.h) as it is
// entered and as it ends. Wrapping the backend, rather than the call sites,
// means every collective is recorded, whoever issues it: the DDP Reducer's
// buckets, the ZeRO gathers and reduce-scatters, the pipeline hand-offs, the
// harness's own figures.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>
#include <vector>

namespace ddpbench {

// `inner` recorded as group `name` of global `ranks`; `inner` itself when
// the recorder is off.
c10::intrusive_ptr<c10d::Backend> RecordingBackend(c10::intrusive_ptr<c10d::Backend> inner, const std::string& name,
                                                   const std::vector<int>& ranks);

}  // namespace ddpbench
