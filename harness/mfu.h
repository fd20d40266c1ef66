// Model FLOPs utilisation: achieved FLOP/s over the device's peak for the
// precision in use. Peaks are the vendors' dense (no sparsity) figures, kept
// in one small table as llm.c's mfu.h keeps them; an unknown device has no
// peak and its row leaves mfu empty rather than guessing.
#pragma once

#include <string>

namespace ddpbench {

// Peak FLOP/s of the CUDA device called `device_name` for `amp`
// (off|bf16|fp16); with amp off, `tf32` (on|off|all) says whether
// convolutions run on TF32 tensor cores. 0 when the device is not in the table.
double PeakFlops(const std::string& device_name, const std::string& amp, const std::string& tf32);

}  // namespace ddpbench
