// One training step of each strategy predicted from a calibration profile's
// measured parts (unit times, parameter and activation bytes, optimizer time)
// and a topology of alpha-beta links. Each family is one small function:
//   ddp          backward units in reverse; the Reducer's buckets (1 MiB
//                first, then --bucket-cap-mb, in gradient-ready order), each
//                all-reduced on the communication stream once backward has
//                passed its parameters; exposed = what ends after backward.
//                --overlap-optimizer: each bucket's parameters stepped on
//                the communication stream as its all-reduce ends, instead of
//                the whole optimizer after the last one (zero1/2: each
//                bucket's slice as its reduce-scatter ends; zero3: each
//                unit's).
//   zero1/zero2  the same buckets reduce-scattered; the optimizer on 1/N of
//                the parameters; the updated buckets all-gathered in forward
//                order, each unit's forward waiting for its buckets.
//   zero3        one bucket per unit, all-gathered before its forward (the
//                next unit's gather issued as a unit starts) and again before
//                its backward; reduce-scattered after its backward.
//   dp           one process: weights broadcast, replicas in parallel,
//                gradients reduced into device 0 one replica at a time.
//   mp/pmp       the schedule's table run by the pipeline simulator with each
//                chunk's measured times, a stage hand-off on the link between
//                its two devices (exposed = the step with hand-offs minus
//                without; bubble = the rest of the busiest device's idle).
//   replicated   (--replicate-degree, hsdp) the group's collectives or
//                hand-offs on the group's topology (links.h SplitTopology);
//                zero*: each reduced shard all-reduced across the replicas
//                after its reduce-scatter, before the optimizer; pp x dp:
//                each device's gradients all-reduced across the replicas
//                once its last action of the step ends, before its optimizer.
// Memory per device: the ZeRO formula for model states plus activations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "projection/links.h"
#include "projection/profile.h"
#include "planning/schedules.h"

namespace ddpbench {

struct StepQuery {
  std::string strategy;     // single|dp|ddp|zero1|zero2|zero3|mp|pmp
  Topology topology;
  int64_t batch = 0;        // per device (mp, pmp: the batch the pipeline splits)
  double bucket_cap_mb = 25;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int micro_batches = 0;    // pmp; 0: 2 x stages where the batch allows it
  int virtual_stages = 0;   // pmp; 0: the schedule's own (2 for interleaved and V)
  // mp/pmp: units per stage as the run split them; empty (or not a split of
  // the profile's units into the table's stages): the fastest split.
  std::vector<int> split;
  // The strategy's group (a shard group of zero1/2/3, a pipeline of pmp/mp)
  // replicated this many times (--replicate-degree; the group is world /
  // replicas consecutive devices); 0: the strategy's default (1; hsdp: one
  // per node).
  int replicas = 0;
  bool overlap_optimizer = false;  // ddp, zero1/2/3, hsdp, mp, pmp (--overlap-optimizer)
  bool gradient_as_bucket_view = false;  // ddp (--gradient-as-bucket-view): one copy of the gradients
  int64_t grad_accum = 1;  // ddp (--grad-accum): micro-steps per optimizer step, each on batch / grad_accum
  // zero1/2/3, hsdp: the shard group's reduce-scatter is an alltoall into a
  // buffer the size of the bucket, then a local sum (Gloo, which has no
  // reduce-scatter of its own: strategies/sharded/reductions.h).
  bool reduce_by_alltoall = false;
};

struct StepPrediction {
  double step_ms = 0, compute_ms = 0, exposed_comm_ms = 0, bubble_ms = 0;
  int64_t images = 0;       // per step, all devices
  double memory_mb = 0;     // the fullest device
  double states_mb = 0;     // its parameters, gradients and optimizer state
  double activation_mb_per_image = 0;
  int micro_batches = 0, virtual_stages = 0;
  bool scaled = false;      // unit times scaled from another batch size
  double ImagesPerSecond() const { return step_ms > 0 ? images * 1000.0 / step_ms : 0; }
  std::string LargestTerm() const;  // compute|exposed_comm|bubble
  // The largest per-device batch whose memory fits `limit_mb` (0: none fits).
  int64_t LargestBatch(double limit_mb, int64_t batch) const;
};

// The strategies the model knows, and the fewest devices each runs on.
const std::vector<std::string>& ModelledStrategies();
int MinimumWorld(const std::string& strategy);

// ConfigError naming the value when the query cannot run (unknown strategy,
// fewer devices than it needs, dp across nodes, more stages than units, a
// micro-batch count the batch or the schedule cannot take).
StepPrediction PredictStep(const Profile& profile, const StepQuery& query);

// The memory of `query` with every unit recomputed (--recompute=all): each
// unit holds its output alone, and the largest unit's other activations are
// re-created once at a time in its backward (for a pipeline: of one
// micro-batch). Memory fields set as PredictStep sets them.
StepPrediction PredictRecomputedMemory(const Profile& profile, const StepQuery& query);

// The memory of one device running the whole model at `batch` (single): the
// model state and the backward's peak, from the profile's bytes alone.
double PredictOneDeviceMemoryMb(const Profile& profile, int64_t batch);

// The families, exposed for tests: `cost` per unit at the batch each device runs.
StepPrediction PredictDdp(const Profile& p, const std::vector<UnitCost>& cost, const Topology& t, double cap_mb,
                          bool overlap_optimizer = false);
StepPrediction PredictZero(const Profile& p, const std::vector<UnitCost>& cost, const Topology& t, double cap_mb,
                           int stage, int replicas = 1, bool overlap_optimizer = false);
StepPrediction PredictDp(const Profile& p, const std::vector<UnitCost>& cost, const Topology& t);

// The Reducer's buckets over `param_bytes` (each tensor, model order): tensor
// indices per bucket in gradient-ready (reverse) order, first bucket up to
// `first_cap` bytes, the others up to `cap`; a bucket closes once it reaches
// its cap.
std::vector<std::vector<int>> ReducerBuckets(const std::vector<double>& param_bytes, double cap, double first_cap);

}  // namespace ddpbench
