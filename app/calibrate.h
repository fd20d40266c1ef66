// ddpbench --calibrate=FILE: measure on this machine what the projection
// model (projection/) needs, and write it as one JSON profile: each unit's
// forward and backward time at the batch and at the micro-batch sizes a
// pipeline would run, its parameter tensors, the activation bytes it holds
// until its backward, the optimizer's time per parameter byte, and, when the
// run has several ranks (--strategy=ddp --gpus=N, or under a launcher), the
// all-reduce, reduce-scatter and all-gather over the run's own process group
// at sizes from 16 KiB to 16 MiB, each kept as measured (the link's table,
// read between those sizes) and fitted to an alpha-beta link. Rank 0 writes
// the file.
#pragma once

#include <torch/types.h>

#include <string>

#include "projection/profile.h"

namespace ddpbench {

struct RunConfig;
struct DistContext;
struct ResNetOptions;

// How long a profile's link part is timed: each collective size at least
// `repeats` rounds and, where its calls are quick, more until they add up to
// `min_seconds` (0: `repeats` alone); what collectives and the computation
// cost each other (CPU devices) over `interference_rounds` rounds. --calibrate
// takes its time (CalibrationEffort()); the defaults are the quick effort of a
// run's own expectation afterwards (expected.cpp: a second or so).
struct LinkEffort {
  int repeats = 3;
  double min_seconds = 0;
  int interference_rounds = 15;
};
LinkEffort CalibrationEffort();

// The profile of this run's model: units timed at `batches`, their bytes,
// the optimizer, and with several ranks the all-reduce at `link_sizes`
// (none: no link) timed with `effort`, and with `sharded_collectives` the
// reduce-scatter and all-gather too (what zero1/2/3 run; seconds more over a
// slow link), and with `point_to_point` a send/recv between ranks 0 and 1
// (pmp's stage hand-off with --stage-ranks). Every rank calls it (the link
// part is collective).
// The all-reduce over `dist`'s group timed at `sizes` with `effort` and
// fitted, its times kept as the link's table (every rank calls it; every
// rank gets the link): with a device mesh, the link between the replicas.
Link MeasureAllReduce(DistContext& dist, const std::vector<int64_t>& sizes, const LinkEffort& effort);

Profile MeasureProfile(const RunConfig& config, const ResNetOptions& options, torch::Device device,
                       DistContext& dist, const std::vector<int64_t>& batches, const std::vector<int64_t>& link_sizes,
                       const LinkEffort& effort, bool sharded_collectives, bool point_to_point = false);

// The bytes alone (each unit's parameters, activations, output and backward
// allocations; no times, no link): what a memory prediction needs, at the
// cost of a few forward and backward passes.
Profile MeasureMemoryProfile(const RunConfig& config, const ResNetOptions& options, torch::Device device);

// Measures and writes config.calibrate; returns the exit code.
int RunCalibration(const RunConfig& config, const ResNetOptions& model, torch::Device device, DistContext& dist);

// The batch sizes the units are timed at: the batch, then halved while it
// divides evenly, down to 1/8 of it and not below 2 (batch norm trains on
// no fewer than 2 values per channel; smaller micro-batches scale linearly).
std::vector<int64_t> CalibrationBatches(int64_t batch);

// Collective `c` (all-reduce, reduce-scatter or all-gather, as the
// strategies issue it on this backend) over `dist`'s group at each of
// `sizes` bytes of the whole buffer: (bytes, seconds per call), over
// `repeats` rounds after an untimed one (more for a size whose calls add up
// to less than `min_seconds`, up to 80), each round taking the sizes in turn
// and timing two back-to-back calls of each after an untimed call; the mean
// over rounds without the fastest and slowest 15%; every rank keeps the
// slowest rank's.
LinkMeasurement MeasureCollective(DistContext& dist, Collective c, const std::vector<int64_t>& sizes, int repeats,
                                  double min_seconds);

// One point-to-point hand-off between ranks 0 and 1 at each of `sizes`
// bytes: half of a send-and-send-back, rounds and bursts as
// MeasureCollective's (ranks 2 and up only meet the others). Collective.
LinkMeasurement MeasurePointToPoint(DistContext& dist, const std::vector<int64_t>& sizes, int repeats);

}  // namespace ddpbench
