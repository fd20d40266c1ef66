// How mp and pmp cut the ResNet's units (stem, every block, head) into
// contiguous stages (one per device, or V per device for an interleaved
// pipeline): by measured time (default), by parameter count, or as --split
// says. The arithmetic of a split is planning/stage_split.h; this measures
// the units and logs the plan.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "models/resnet.h"
#include "planning/stage_split.h"

namespace ddpbench {

struct RunConfig;

// The image height/width of the run's batches (synthetic: 224 px unless
// --image-size says otherwise; real data: its own size).
int64_t RunImageSize(const RunConfig& config);

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
