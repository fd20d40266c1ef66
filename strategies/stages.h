// How mp and pmp cut the ResNet's units (stem, every block, head) into one
// contiguous stage per device, and the order in which a pipeline stage runs
// its micro-batches. Pure logic apart from MeasureUnitTimes; exposed for tests.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "models/resnet.h"

namespace ddpbench {

struct RunConfig;

// The contiguous partition of `costs` (one per unit, in order) into `parts`
// non-empty stages that minimises the largest stage cost (exact dynamic
// programme over cut positions; among equal optima the earliest cuts win).
// Returns the number of units of each stage. Requires 1 <= parts <= units.
std::vector<int> BalanceSplit(const std::vector<double>& costs, int parts);

// Throws ConfigError when the model's units cannot give one stage per device.
void CheckStageCount(const std::string& strategy, int devices, const std::vector<std::string>& unit_names);

// Parses --split ("4,6": units per device, in device order) and checks it
// against the model: exactly `devices` counts >= 1 summing to the number of
// units; otherwise a ConfigError naming the value and what is accepted.
std::vector<int> ParseSplit(const std::string& split, int devices, const std::vector<std::string>& unit_names);

// "8,2": the form --split accepts, as recorded in the row's split column.
std::string SplitCounts(const std::vector<int>& counts);
// "stem..layer4.0 | layer4.1..head", for the log.
std::string DescribeSplit(const std::vector<int>& counts, const std::vector<std::string>& unit_names);

// Milliseconds of forward + backward of each unit of `model` on `sample`
// (on the model's device, in the calling thread): the minimum over
// `repeats` rounds after one untimed round. The model is not changed (it
// times a clone).
std::vector<double> MeasureUnitTimes(const ResNet& model, const torch::Tensor& sample, int repeats = 3);

// The split of a run: --split if given, else balanced by parameter count
// (--balance=params) or by MeasureUnitTimes on a batch of `sample_batch`
// images of the run's shape (--balance=time). Logs the split.
std::vector<int> ChooseSplit(const RunConfig& config, const ResNet& model, int devices, int64_t sample_batch);

// Pipeline schedules. Every stage runs each micro-batch's forward once and
// its backward once; all stages run their forwards in micro-batch order and
// their backwards in one common order, so FIFO queues between stages suffice.
enum class PipelineSchedule {
  kGPipe,  // all forwards, then all backwards (last micro-batch first)
  k1F1B,   // S-1-s warm-up forwards, then one forward one backward, then the rest
};
PipelineSchedule ParsePipelineSchedule(const std::string& name);  // gpipe|1f1b
struct PipelineOp {
  bool forward = true;
  int micro_batch = 0;
  bool operator==(const PipelineOp& o) const { return forward == o.forward && micro_batch == o.micro_batch; }
};
std::vector<PipelineOp> StageSchedule(PipelineSchedule schedule, int stage, int stages, int micro_batches);

// The idle fraction of an ideal pipeline of equal stages: (S-1)/(M+S-1).
double TheoreticalBubble(int stages, int micro_batches);

}  // namespace ddpbench
