// How pmp picks the shape of its pipeline when the user leaves it open:
// without --chunks, the number of micro-batches, and, unless --schedule is
// given, the schedule (1f1b or zero-bubble, or interleaved or interleaved-
// zero-bubble with V chunks per device). More
// micro-batches shrink the bubble, but on a CPU (and for weight-heavy layers
// on small images anywhere) each micro-batch costs a fixed extra: every
// layer's weights are read, reordered and their gradients accumulated once
// per micro-batch, whatever its size. Interleaving shrinks the bubble
// without more micro-batches. So each candidate is costed with the units'
// forward and backward times measured at its micro-batch size (every size
// in the same interleaved rounds, so that the comparison between sizes does
// not hinge on which minute each was measured in), the split
// whose simulated step is shortest (FastestSplit; with --balance=time, the
// default, for a given shape too), and its schedule table run on ideal
// devices (SimulatePipeline); the fastest predicted step wins. With
// --units=auto (the default) the units are measured as half blocks and each
// candidate is also costed with whole blocks (each block's halves summed,
// cuts between blocks only); half blocks are kept only where they are
// predicted clearly faster, as a cut inside a block hands on two tensors and
// its halves cost a concatenation and slices that whole blocks do not.
#pragma once

#include <string>
#include <vector>

#include "models/resnet.h"
#include "strategies/schedules.h"
#include "strategies/stages.h"

namespace ddpbench {

struct RunConfig;

struct PipelineShape {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int virtual_stages = 1;
  int micro_batches = 1;
  StagePlan plan;             // the split, measured at this micro-batch size
  double predicted_ms = 0;    // the simulated step (0: not simulated)
  bool half_blocks = false;   // the plan counts half blocks (else whole blocks)
};

// The split is the measured one: no --split, --balance=time.
bool SplitMeasured(const RunConfig& config);

// True when pmp chooses the units itself: --units=auto with SplitMeasured.
// Setup then builds the model in half blocks for ChoosePipelineShape, and
// again in blocks if its plan counts whole blocks.
bool UnitsOpen(const RunConfig& config);

// Whether pmp re-splits after the warm-up (rebalance.h): --rebalance=warmup,
// or auto (the default) with one chunk per device (`virtual_stages` 1); and
// either way SplitMeasured and at least 2 warm-up steps. With interleaving a device's chunks interfere (on the 2-core
// VM a device's second chunk ran 0.9-2.1x its set-up sum), so a chunk's
// in-run time is no measure of its units, and re-splitting did not pay there
// (results/cpu-2core-rebalance-ab.csv).
bool RebalanceApplies(const RunConfig& config, int virtual_stages);

// Each unit's block, numbered from 0 in order: a half-block model's
// "layer3.1a" and "layer3.1b" are one block; every other unit (the stem, the
// head, a whole block) is its own.
std::vector<int> BlockOfUnit(const std::vector<std::string>& unit_names);

// The names of the blocks of BlockOfUnit ("layer3.1" for "layer3.1a" and
// "layer3.1b"): a whole-block model's unit names.
std::vector<std::string> WholeBlockNames(const std::vector<std::string>& unit_names);

// A split counted in whole blocks (BlockOfUnit's blocks) as the same cuts
// counted in the units of `unit_names` (each half-block block is 2 units).
std::vector<int> SplitInUnits(const std::vector<int>& block_counts, const std::vector<std::string>& unit_names);

// Times of half-block units summed per block (BlockOfUnit): the times of the
// same model's units built in whole blocks.
UnitTimes MergeHalfBlocks(const UnitTimes& halves, const std::vector<std::string>& unit_names);

// The step of `table` on ideal devices with chunk times from `plan` (forward
// measured; backward = the rest; a split backward's B and W as halves, the
// first chunk's all W).
double PredictStepMs(const PipelineTable& table, const StagePlan& plan);

// The split of the measured units into the table's chunks whose simulated
// step (PredictStepMs) is shortest: every contiguous split is tried, except
// those where one device's busy time alone (M x its chunks' times) already
// exceeds the best step found. Starts from BalanceSplit (the slowest chunk
// as fast as possible) and keeps it unless another is strictly faster: with
// V chunks a device, or a first chunk whose forward the others wait for, the
// slowest chunk is not what sets the step.
std::vector<int> FastestSplit(const PipelineTable& table, const UnitTimes& measured);

// The micro-batch counts tried when --chunks is not given: divisors of the
// batch from the device count up (at least 1), in increasing order, each
// leaving micro-batches of at least `fewest_images` (FewestTrainingImages).
std::vector<int> MicroBatchCandidates(int64_t batch_size, int devices, int64_t fewest_images = 1);

// --chunks, --schedule and --virtual-stages as given, the rest chosen by
// predicted step time (see above); logs each candidate and the choice. With
// UnitsOpen, `model` is built in half blocks and the result says which units
// its plan counts: half blocks also where whole blocks win but the run will
// re-split (RebalanceApplies), the same cuts counted in half blocks, so that
// the re-split can move half a block. `measure_threads`: how many threads
// time the units at once on a CPU (0: one per device; 1 where every device
// is its own process measuring at the same time, --stage-ranks).
PipelineShape ChoosePipelineShape(const RunConfig& config, const ResNet& model, int devices,
                                  int measure_threads = 0);

}  // namespace ddpbench
