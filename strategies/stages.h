// How mp and pmp cut the ResNet's units (stem, every block, head) into
// contiguous stages (one per device, or V per device for an interleaved
// pipeline): by measured time (default), by parameter count, or as --split
// says. Pure logic apart from MeasureUnitTimes; exposed for tests.
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

// Throws ConfigError when the model's units cannot give one stage per device
// (virtual_stages > 1: V stages per device).
void CheckStageCount(const std::string& strategy, int devices, const std::vector<std::string>& unit_names,
                     int virtual_stages = 1);

// Parses --split ("4,6": units per stage, in stage order) and checks it
// against the model: exactly `stages` counts >= 1 summing to the number of
// units; otherwise a ConfigError naming the value and what is accepted.
// `stages_from` names where the stage count comes from ("--gpus=2").
std::vector<int> ParseSplit(const std::string& split, int stages, const std::vector<std::string>& unit_names,
                            const std::string& stages_from = "");

// "8,2": the form --split accepts, as recorded in the row's split column.
std::string SplitCounts(const std::vector<int>& counts);
// "stem..layer4.0 | layer4.1..head", for the log.
std::string DescribeSplit(const std::vector<int>& counts, const std::vector<std::string>& unit_names);

// The image height/width of the run's batches (synthetic: 224 px unless
// --image-size says otherwise; real data: its own size).
int64_t RunImageSize(const RunConfig& config);

// Each unit's forward+backward and forward ms on one batch size.
struct UnitTimes {
  std::vector<double> total_ms, forward_ms;
};

// Milliseconds of forward + backward (and of forward alone) of each unit of
// `model` on each of `samples` (on the model's device, in the calling
// thread): the minimum over `repeats` rounds after one untimed round. Each
// round times every sample once, in turn, so that a slow minute on a shared
// machine hits every sample alike rather than the one measured during it.
// The model is not changed (it times a clone).
std::vector<UnitTimes> MeasureUnitTimes(const ResNet& model, const std::vector<torch::Tensor>& samples,
                                        int repeats = 3);

// MeasureUnitTimes on batches of each of `sample_batches` images of the
// run's shape, under the run's --amp autocast; logged. `concurrent` > 1 on a CPU: the measurement runs on
// that many threads at once (each on its own clone) and each unit's time is
// their mean. Logical CPU devices share the machine's memory bandwidth and
// caches, and a pipeline runs them at the same time: a unit timed alone is
// faster than in the run, weight-heavy units (whose weights every
// micro-batch reads again) most. GPUs each have their own memory: there the
// measurement runs once.
std::vector<UnitTimes> MeasureUnits(const RunConfig& config, const ResNet& model,
                                    const std::vector<int64_t>& sample_batches, int concurrent = 1);

// Forward+backward ms of each stage: the sums of `unit_ms` over `counts`.
std::vector<double> StageTimes(const std::vector<int>& counts, const std::vector<double>& unit_ms);

struct StagePlan {
  std::vector<int> counts;        // units per stage
  std::vector<double> stage_ms;   // measured forward+backward ms per stage (one micro-batch)
  std::vector<double> unit_ms;    // the same per unit
  std::vector<double> unit_forward_ms;  // the forward part of unit_ms
};

// The plan of the split `counts` with unit times `times` (stage_ms: StageTimes).
StagePlan PlanOfSplit(const std::vector<int>& counts, const UnitTimes& times);

// The split of `measured` units into devices x virtual_stages stages:
// --split if given, else balanced by --balance (time or parameter count).
// Pure: no measuring, no logging.
StagePlan PlanStages(const RunConfig& config, const ResNet& model, int devices, int virtual_stages,
                     const UnitTimes& measured);
// Logs a plan: which units go where, parameters and ms per stage.
void LogStagePlan(const RunConfig& config, const ResNet& model, const StagePlan& plan);

// The split of a run into devices x virtual_stages stages: --split if given,
// else balanced by MeasureUnitTimes on a batch of `sample_batch` images of
// the run's shape (--balance=time, the default: the slowest stage as fast as
// possible) or by parameter count (--balance=params). Each stage's time is
// measured either way. Logs the split and the stage times. (MeasureUnits,
// PlanStages and LogStagePlan in one.)
StagePlan ChooseSplit(const RunConfig& config, const ResNet& model, int devices, int virtual_stages,
                      int64_t sample_batch);

}  // namespace ddpbench
