// The schedule walk: one device's row of the schedule table (schedules.h)
// run in its worker thread, action by action (forward, whole backward, or a
// zero-bubble schedule's B and W), each chunk back-propagating its own part
// and handing its input gradient upstream, then the device's optimizer step.
#pragma once

#include "strategies/pipeline/engine.h"
#include "strategies/pipeline/transport.h"

namespace ddpbench::pipeline {

// Device d's part of one step: its row of the table, then its optimizer
// step (fp16: the unscale; the step follows once every device's overflow
// flag is known).
void RunDevice(Engine& e, Transport& transport, int d, StepState& state);

}  // namespace ddpbench::pipeline
