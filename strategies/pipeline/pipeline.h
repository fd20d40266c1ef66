// The model-parallel engine behind mp and pmp: the ResNet's units cut into
// model chunks (stages.h; one per device, or V per device round-robin for an
// interleaved schedule), each device's chunks run by a persistent worker
// thread (with its own CUDA stream on a GPU), boundary activations detached
// and handed to the next chunk, and chunk-local autograd: each chunk
// back-propagates its own part and hands its input gradient upstream, and
// each device steps its own optimizer. The batch is cut into micro-batches
// and every device runs its row of a schedule table (schedules.h: gpipe,
// 1f1b, interleaved, zero-bubble with the backward split into B and W,
// split_backward.h). mp is the one-micro-batch case, where the stages take
// turns.
//
// Its parts, each in this folder: engine.h (the state they share), walk.h
// (a device's row of the table), transport.h (hand-offs between chunks, in
// one process or across --stage-ranks), placement.h (units on devices, the
// re-split after the warm-up), figures.h (the row's columns), and
// pipeline.cpp (the strategy: set-up, steps, evaluation, snapshots).
//
// Row extras: split (units per chunk, "5,5", what --split accepts; pmp's
// --rebalance=warmup may change it after the warm-up, rebalance.h),
// split_setup (the split chosen at set-up),
// stage_time_ms (each chunk's forward+backward measured at setup), chunks,
// schedule and virtual_stages (pmp), bubble_theory ((S-1)/(V*M+S-1); for
// zero-bubble its table simulated with the measured F/B/W times),
// bubble_simulated (the table simulated with the measured times, any
// schedule: what unequal stages leave without waits or noise),
// bubble_measured (1 - sum(device busy)/(S x wall time) over the timed steps),
// stage_busy_ms (mean busy ms per step of each device), stage_busy_step_ratio
// (median/largest over timed steps of the busiest device's busy ms in the
// step over the least busy's), chunk_fbw_ms (mean ms
// of one micro-batch's F:B[:W] on each chunk) and activation_peak_mb (each
// device's peak allocation above its level at the start of a step), w_fill_ms
// (zero-bubble on CPU with --fill-waits=on: each device's mean ms per step of
// W run while an input was missing; a device whose next input has not arrived
// runs its first pending W a weight node at a time until it does).
#pragma once

#include <memory>

#include "strategies/strategy.h"

namespace ddpbench {

struct PipelineShape;

// `pipelined`: --chunks micro-batches by --schedule (pmp); otherwise the
// whole batch at once (mp). `forced`: pmp runs this shape, chosen and
// checked already, and logs nothing of it (the shape trials).
std::unique_ptr<Strategy> MakePipelineStrategy(bool pipelined, const PipelineShape* forced = nullptr);

}  // namespace ddpbench
