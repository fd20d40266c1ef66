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
// devices (SimulatePipeline); the fastest predicted step wins, unless the
// trials of the strongest candidates (shape_trials.h) measure otherwise. With
// --units=auto (the default) the units are measured as half blocks and each
// candidate is also costed with whole blocks (each block's halves summed,
// cuts between blocks only); half blocks are kept only where they are
// predicted clearly faster, as a cut inside a block hands on two tensors and
// its halves cost a concatenation and slices that whole blocks do not.
#pragma once

#include <string>
#include <vector>

#include "models/resnet.h"
#include "planning/pipeline_plan.h"
#include "strategies/pipeline/stages.h"

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

// Every candidate costed, simplest first (fewer micro-batches, then fewer
// chunks), the one chosen by prediction, and, with --shape-trials=K, those
// to run for a few steps before committing (ShapesToTry: the pick, the K
// fastest predicted, mp's one micro-batch, the best plain 1F1B and ZB-V; empty
// where there is nothing to compare). `measured`: the unit times at each
// micro-batch size, `count_of` each candidate's entry in it.
struct ShapeChoice {
  std::vector<PipelineShape> costed;
  size_t chosen = 0;
  std::vector<size_t> to_try;
  std::vector<UnitTimes> measured;
  std::vector<size_t> count_of;
};
ShapeChoice CostPipelineShapes(const RunConfig& config, const ResNet& model, int devices, int measure_threads = 0);
// Candidate `index` as the run will use it: with --units=auto, a whole-block
// plan counted in half blocks where the run will re-split (see below),
// which is logged unless `quiet`.
PipelineShape FinishShape(const RunConfig& config, const ResNet& model, const ShapeChoice& choice, size_t index,
                          bool quiet = false);

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
