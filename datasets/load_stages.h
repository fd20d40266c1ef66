// The stages of an image loader's work on a batch, named once for the
// loader that clocks them and the row that reports them (torch-free, so the
// run's result can hold them): reading a file, its header, decoding, crop +
// resize, normalising, and collating (copying samples into the batch,
// labels, pinning).
#pragma once

#include <array>

namespace ddpbench {

enum class LoadStage { kRead, kHeader, kDecode, kResize, kNormalise, kCollate };
constexpr int kLoadStages = 6;
inline constexpr const char* kLoadStageNames[kLoadStages] = {"read",   "header",    "decode",
                                                             "resize", "normalise", "collate"};
using StageSeconds = std::array<double, kLoadStages>;  // or milliseconds, per stage

}  // namespace ddpbench
