// Each strategy family's step from measured parts (step_model.h).
#include "projection/step_model.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "planning/held_activations.h"
#include "projection/timeline.h"
#include "planning/pipeline_plan.h"
#include "planning/traits.h"
#include "planning/zero_memory.h"

namespace ddpbench {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Every trainable tensor of the model, in model order, with its unit.
struct Tensors {
  std::vector<double> bytes;
  std::vector<int> unit;
};
Tensors TensorsOf(const Profile& p) {
  Tensors t;
  for (size_t u = 0; u < p.units.size(); ++u)
    for (double b : p.units[u].param_bytes) t.bytes.push_back(b), t.unit.push_back(static_cast<int>(u));
  return t;
}

double Ms(double seconds) { return seconds * 1000.0; }

double OptimizerMs(const Profile& p, double param_bytes) { return p.optimizer_ms_per_mb * param_bytes / kMiB; }

double ActivationBytesPerImage(const Profile& p) {
  double a = 0;
  for (const UnitProfile& u : p.units) a += u.activation_bytes;
  return a;
}

double AllParamBytes(const Profile& p) {
  double all = 0;
  for (const UnitProfile& u : p.units) all += u.ParamBytes();
  return all;
}

ModelStateBytes StateBytes(const Profile& p) { return BytesPerParameter(p.optimizer, p.momentum, p.element_bytes); }

// How a strategy's backward holds the parameters' gradients it makes.
enum class GradsHeld {
  kApart,   // they are states (kept buckets, flat buffers) the walk does not count
  kMade,    // .grad made as the backward goes: the new gradient is that .grad
  kCopied,  // made and copied into a bucket buffer as it goes: the new one is a temporary beside its slot
};

// The activation side of one device's peak, in bytes: walking the backward
// of units [first, last] from the last, unit u's backward holds the
// activations of the units up to u (of the `images` it runs; `others` images
// of other micro-batches in flight hold all of theirs), the gradients of u's
// output and what its backward allocates beyond that (at least its input's
// gradient; UnitProfile::backward_bytes), unless the gradients are held
// apart those of the units behind it, and `beside[u]` (if given).
double BackwardPeakBytes(const Profile& p, size_t first, size_t last, double images, double others,
                         GradsHeld held, const std::vector<double>& beside = {}) {
  double all = 0;
  for (size_t v = first; v <= last; ++v) all += p.units[v].activation_bytes;
  double peak = all * (images + others), below = all, grads = 0;
  for (size_t u = last + 1; u-- > first;) {
    if (held != GradsHeld::kApart) grads += p.units[u].ParamBytes();
    // Where .grad is made as it goes, the weights' new gradients are that
    // .grad (counted in `grads`), not a temporary beside it.
    const double own = held == GradsHeld::kMade
                           ? std::max(0.0, p.units[u].BackwardBytes(images) - p.units[u].ParamBytes())
                           : p.units[u].BackwardBytes(images);
    const double in = std::max(images * (u > first ? p.units[u - 1].output_bytes : 0), own);
    peak = std::max(peak, images * (below + p.units[u].output_bytes) + in + others * all + grads +
                              (beside.empty() ? 0.0 : beside[u]));
    below -= p.units[u].activation_bytes;
  }
  return peak;
}

// Data-parallel memory: the ZeRO formula, and the backward's peak over the
// whole model (BackwardPeakBytes). Where .grad is made as the backward goes
// and is not one of the formula's states (single, dp: set to none every
// step; zero2/3: full gradients until reduced), it is counted by the walk:
// ddp keeps its bucket buffers (the formula's gradients) beside .grad, zero1
// its .grad as views of its flat buffer; zero3 also gathers a unit at a time.
// `micro_steps`: ddp's --grad-accum; `alltoall_copies`: per unit, the bytes
// a reduce-scatter by alltoall holds beside its backward (empty: none).
void SetDataParallelMemory(const Profile& p, Family family, int stage, int world, int64_t batch,
                           bool bucket_views, int64_t micro_steps, const std::vector<double>& alltoall_copies,
                           StepPrediction* out) {
  const ModelStateBytes per = StateBytes(p);
  out->states_mb = ZeroExpectedMb(stage, p.Parameters(), world, per);
  const bool plain = family == Family::kSingle || family == Family::kDataInProcess;
  // ddp --gradient-as-bucket-view: each gradient autograd makes is copied
  // into its bucket and dropped, so backward holds no second set. zero2/3
  // copy each into a bucket buffer, which holds it until reduced.
  const GradsHeld held = stage == 1 || bucket_views ? GradsHeld::kApart
                         : stage >= 2             ? GradsHeld::kCopied
                                                  : GradsHeld::kMade;
  const double grads_mb = static_cast<double>(p.Parameters()) * per.grad / kMiB;
  double fixed = out->states_mb;
  if (plain) fixed -= grads_mb;  // the walk counts them
  if (stage == 3)
    for (const UnitProfile& u : p.units) fixed = std::max(fixed, out->states_mb + u.ParamBytes() / kMiB);
  const double acts = BackwardPeakBytes(p, 0, p.units.size() - 1, static_cast<double>(batch), 0, held) / kMiB;
  out->activation_mb_per_image = ActivationBytesPerImage(p) / kMiB;
  out->memory_mb = fixed + acts;
  if (family == Family::kDataRanks && micro_steps > 1) {
    // ddp --grad-accum: each backward holds one micro-batch's activations;
    // the micro-steps before the last make .grad (with or without bucket
    // views), a full set beside the buckets through every later backward.
    const size_t last = p.units.size() - 1;
    const double micro = static_cast<double>(batch) / static_cast<double>(micro_steps);
    const double first = BackwardPeakBytes(p, 0, last, micro, 0, GradsHeld::kMade) / kMiB;
    const double later = grads_mb + BackwardPeakBytes(p, 0, last, micro, 0, GradsHeld::kApart) / kMiB;
    out->memory_mb = out->states_mb + std::max(first, later);
  }
  if (!alltoall_copies.empty()) {
    // Over Gloo (AlltoallCopiesBefore) the received copies of the buckets
    // reduced so far sit beside the rest of backward, and all of them beside its end.
    const double during =
        BackwardPeakBytes(p, 0, p.units.size() - 1, static_cast<double>(batch), 0, held, alltoall_copies);
    const double after = AllParamBytes(p) * (held == GradsHeld::kApart ? 1 : 2);  // the copies (and buffers)
    out->memory_mb = std::max(out->memory_mb, out->states_mb + std::max(during, after) / kMiB);
  }
}

// The earliest unit (model order) among a bucket's tensors: its gradients are
// complete once backward has passed that unit.
int FirstUnit(const std::vector<int>& bucket, const Tensors& t) {
  int u = t.unit[bucket[0]];
  for (int i : bucket) u = std::min(u, t.unit[i]);
  return u;
}
double BucketBytes(const std::vector<int>& bucket, const Tensors& t) {
  double b = 0;
  for (int i : bucket) b += t.bytes[i];
  return b;
}
double FirstCap(double cap_mb) { return cap_mb == 25.0 ? std::min(1.0, cap_mb) * kMiB : cap_mb * kMiB; }

}  // namespace

std::string StepPrediction::LargestTerm() const {
  if (exposed_comm_ms >= compute_ms && exposed_comm_ms >= bubble_ms) return "exposed_comm";
  return bubble_ms > compute_ms ? "bubble" : "compute";
}

int64_t StepPrediction::LargestBatch(double limit_mb, int64_t batch) const {
  if (limit_mb <= states_mb || batch <= 0) return 0;
  const double per_image = (memory_mb - states_mb) / static_cast<double>(batch);
  if (per_image <= 0) return 0;
  return static_cast<int64_t>(std::floor((limit_mb - states_mb) / per_image));
}

std::vector<std::vector<int>> ReducerBuckets(const std::vector<double>& param_bytes, double cap, double first_cap) {
  std::vector<std::vector<int>> buckets;
  double size = 0;
  for (int i = static_cast<int>(param_bytes.size()) - 1; i >= 0; --i) {
    if (buckets.empty() || size >= (buckets.size() == 1 ? first_cap : cap)) buckets.push_back({}), size = 0;
    buckets.back().push_back(i);
    size += param_bytes[i];
  }
  return buckets;
}

namespace {

// A step's operations on the two streams (timeline.h) as a strategy issues
// them: compute counted as it is added; each collective on the link (plus
// the time a loaded CPU adds to it, Profile::comm_loaded_* or its
// sharded_comm for the all-gather and reduce-scatter; none on one
// device, where the strategies issue no collectives), and
// on devices that move the bytes themselves what it costs the computation
// (Profile::comm_compute_*) taken from the compute stream where it is issued.
class StepBuilder {
 public:
  StepBuilder(const Profile& p, const Topology& t) : p_(p), t_(t) {
    if (p.step_overhead_ms > 0) Compute(p.step_overhead_ms);  // loss, zeroing, autograd's own work
  }
  int Compute(double ms, std::vector<int> after = {}) {
    compute_ms_ += ms;
    return Add(0, ms, std::move(after));
  }
  // The collective's time on the link, plus what a loaded CPU adds to it.
  // Where the link has lanes, what is waiting overlaps another call: the
  // part of its fit's zero-byte time that is not the cores' work per call
  // (Profile::comm_compute_ms_per_call; a round trip, a shaper) and a loaded
  // CPU's per-call addition (a wait for a core). What is throughput does
  // not: its bytes, and a loaded CPU's per-MiB addition (busy cores copy one
  // call's bytes at a time).
  // `on`: the devices it runs over (a group of a mesh), else the whole
  // topology; `stream` 2: the mesh's replicate group, a process group of its
  // own whose calls run beside the group's.
  int Collective(Collective kind, double bytes, std::vector<int> after, const Topology* on = nullptr,
                 int stream = 1) {
    const Topology& t = on ? *on : t_;
    if (stream == 2) replicate_lanes_ = (t.nodes > 1 ? t.inter : t.intra).lanes;
    if (t.world() == 1) return Add(stream, 0, std::move(after));  // one rank: the strategies issue none
    const Profile::CommTerms terms = p_.CommTermsOf(kind);
    const double loaded_bytes = terms.loaded_ms_per_mb * bytes / kMiB;
    const double on_link = Ms(TopologySeconds(t, kind, bytes));
    const double per_call = std::min(on_link, Ms(TopologySeconds(t, kind, 0)));
    const double serial = on_link - per_call + std::min(per_call, terms.compute_ms_per_call) + loaded_bytes;
    const int id = Add(stream, on_link + terms.loaded_ms_per_call + loaded_bytes, std::move(after), serial);
    const double interference = terms.compute_ms_per_call + terms.compute_ms_per_mb * bytes / kMiB;
    if (interference > 0) Add(0, interference, {});  // counted as communication, not compute
    return id;
  }
  // The model's buffers broadcast from rank 0 before the forward (ddp,
  // zero1/2/3: DDP's broadcast_buffers), one call per flat tensor, issued
  // together (broadcast_coalesced keeps two in flight); what comes after
  // waits for all of them.
  std::vector<int> BufferBroadcasts() {
    std::vector<int> ids;
    for (double bytes : p_.buffer_broadcast_bytes) ids.push_back(Collective(Collective::kBroadcast, bytes, {}));
    return ids;
  }
  // The all-reduce across a mesh's replicas of `bytes` (one reduced shard), after `after`.
  int Replicate(double bytes, int after, const MeshTopology& mesh) {
    return Collective(Collective::kAllReduce, bytes, {after}, &mesh.replicas, /*stream=*/2);
  }
  // Compute run on the communication stream once `after` has ended
  // (--overlap-optimizer: a reduced bucket's step, run where its reduction
  // completes).
  int ComputeBeside(double ms, int after) {
    compute_ms_ += ms;
    return Add(1, ms, {after});
  }
  StepPrediction Finish() const {
    std::vector<int> lanes{(t_.nodes > 1 ? t_.inter : t_.intra).lanes};
    if (replicate_lanes_ > 0) lanes.push_back(replicate_lanes_);
    const std::vector<double> end = RunTimeline(ops_, lanes, Wait());
    StepPrediction out;
    out.step_ms = *std::max_element(end.begin(), end.end());
    out.compute_ms = compute_ms_;
    out.exposed_comm_ms = std::max(0.0, out.step_ms - compute_ms_);
    return out;
  }

 private:
  // How calls wait for the core, where the profile gives both terms (set by
  // hand or bench_projection.py --set; --calibrate writes neither).
  std::optional<CoreWait> Wait() const {
    if (!p_.comm_wake_ms || !p_.comm_core_latency_ms) return std::nullopt;
    return CoreWait{*p_.comm_wake_ms, *p_.comm_core_latency_ms};
  }
  int Add(int stream, double ms, std::vector<int> after, double wire_ms = 0) {
    ops_.push_back({stream, ms, std::move(after), wire_ms});
    return static_cast<int>(ops_.size()) - 1;
  }
  const Profile& p_;
  const Topology& t_;
  std::vector<TimelineOp> ops_;
  double compute_ms_ = 0;
  int replicate_lanes_ = 0;  // lanes of the replicate group's stream (0: none issued)
};

// Backward in reverse unit order; after each unit, the collective `kind` of
// every bucket whose gradients are then complete. Returns those collectives.
// With a mesh (`mesh`), each collective runs in the group and is followed by
// the all-reduce of its 1/S result across the replicas: the ids returned.
// `reduced(b, id)`, where given, is called as bucket b's reduction `id` is
// issued (what runs after it on its stream goes in there, in issue order).
std::vector<int> BackwardWithBuckets(const std::vector<UnitCost>& cost, const Tensors& tensors,
                                     const std::vector<std::vector<int>>& buckets, Collective kind, StepBuilder* step,
                                     const MeshTopology* mesh = nullptr,
                                     const std::function<void(size_t, int)>& reduced = {}) {
  std::vector<int> issued;
  size_t next = 0;
  for (int u = static_cast<int>(cost.size()) - 1; u >= 0; --u) {
    const int backward = step->Compute(cost[u].backward_ms);
    for (; next < buckets.size() && FirstUnit(buckets[next], tensors) >= u; ++next) {
      const double bytes = BucketBytes(buckets[next], tensors);
      issued.push_back(step->Collective(kind, bytes, {backward}, mesh ? &mesh->group : nullptr));
      if (mesh && mesh->replicas.world() > 1)
        issued.back() = step->Replicate(bytes / mesh->group.world(), issued.back(), *mesh);
      if (reduced) reduced(next, issued.back());
    }
  }
  return issued;
}

// Backward with each bucket's reduction (`kind`), then the optimizer on
// 1/`shards` of the parameters: after the last reduction, or
// (--overlap-optimizer) each bucket's part on the communication stream right
// after its own reduction (issued in order, so the next reduction on that lane
// waits for it, as on the thread that runs both).
void BackwardThenStep(const Profile& p, const std::vector<UnitCost>& cost, const Tensors& tensors,
                      const std::vector<std::vector<int>>& buckets, Collective kind, int shards, bool overlap,
                      StepBuilder* step, const MeshTopology* mesh = nullptr) {
  if (!overlap) {
    step->Compute(OptimizerMs(p, AllParamBytes(p)) / shards,
                  BackwardWithBuckets(cost, tensors, buckets, kind, step, mesh));
    return;
  }
  BackwardWithBuckets(cost, tensors, buckets, kind, step, mesh, [&](size_t b, int id) {
    step->ComputeBeside(OptimizerMs(p, BucketBytes(buckets[b], tensors)) / shards, id);
  });
}

}  // namespace

StepPrediction PredictDdp(const Profile& p, const std::vector<UnitCost>& cost, const Topology& t, double cap_mb,
                          bool overlap_optimizer) {
  const Tensors tensors = TensorsOf(p);
  StepBuilder step(p, t);
  std::vector<int> after = step.BufferBroadcasts();
  for (const UnitCost& c : cost) step.Compute(c.forward_ms, std::exchange(after, {}));
  const auto buckets = ReducerBuckets(tensors.bytes, cap_mb * kMiB, FirstCap(cap_mb));
  BackwardThenStep(p, cost, tensors, buckets, Collective::kAllReduce, 1, overlap_optimizer, &step);
  return step.Finish();
}

namespace {

// zero3: each unit's parameters gathered before its forward and again before
// its backward but the last unit's, which zero_sharded keeps from its
// forward to its backward; its gradients reduce-scattered after it; the
// optimizer on 1/N. zero_sharded starts the next unit's gather (forward) or
// the previous unit's (backward) once a unit's own gather has ended, as the
// unit starts: so where the gathers take longer than the compute they run
// one after another, never two at once.
StepPrediction PredictZero3(const Profile& p, const std::vector<UnitCost>& cost, const Topology& t,
                            const MeshTopology& mesh, bool overlap_optimizer) {
  const int U = static_cast<int>(cost.size());
  const int S = mesh.group.world();
  StepBuilder step(p, t);
  auto gather = [&](int u, std::vector<int> after) {
    return step.Collective(Collective::kAllGather, p.units[u].ParamBytes(), std::move(after), &mesh.group);
  };
  std::vector<int> forward(U), backward(U), gathered(U), regathered(U), scatters;
  const std::vector<int> broadcasts = step.BufferBroadcasts();
  gathered[0] = gather(0, broadcasts);
  for (int u = 0; u < U; ++u) {  // unit u starts once the unit before it and its own gather have ended
    std::vector<int> starts{gathered[u]};
    if (u > 0) starts.push_back(forward[u - 1]);
    if (u + 1 < U) gathered[u + 1] = gather(u + 1, starts);
    forward[u] = step.Compute(cost[u].forward_ms, starts);
  }
  regathered[U - 1] = gathered[U - 1];  // kept: its backward follows at once
  for (int u = U - 1; u >= 0; --u) {
    const std::vector<int> starts{regathered[u], u + 1 < U ? backward[u + 1] : forward[U - 1]};
    if (u > 0) regathered[u - 1] = gather(u - 1, starts);
    backward[u] = step.Compute(cost[u].backward_ms, starts);
    scatters.push_back(
        step.Collective(Collective::kReduceScatter, p.units[u].ParamBytes(), {backward[u]}, &mesh.group));
    if (mesh.replicas.world() > 1)  // the reduced shard across the replicas
      scatters.back() = step.Replicate(p.units[u].ParamBytes() / S, scatters.back(), mesh);
    if (overlap_optimizer) step.ComputeBeside(OptimizerMs(p, p.units[u].ParamBytes()) / S, scatters.back());
  }
  if (!overlap_optimizer) step.Compute(OptimizerMs(p, AllParamBytes(p)) / S, scatters);
  return step.Finish();
}

// A sharded strategy's reduce-scatter as an alltoall (Gloo): each bucket's
// received copy is kept until backward ends. Per unit, the copies already
// made as its backward starts: those of the buckets completed before it
// (zero3's buckets are the model's units; zero1/2's c10d's Reducer's).
std::vector<double> AlltoallCopiesBefore(const Profile& p, double cap_mb, int stage) {
  std::vector<double> before(p.units.size(), 0.0);
  std::vector<double> completes(p.units.size(), 0.0);  // bytes of the buckets completed by each unit's backward
  if (stage == 3) {
    for (size_t u = 0; u < p.units.size(); ++u) completes[u] = p.units[u].ParamBytes();
  } else {
    const Tensors tensors = TensorsOf(p);
    for (const auto& bucket : ReducerBuckets(tensors.bytes, cap_mb * kMiB, FirstCap(cap_mb)))
      completes[static_cast<size_t>(FirstUnit(bucket, tensors))] += BucketBytes(bucket, tensors);
  }
  for (size_t u = p.units.size() - 1; u-- > 0;) before[u] = before[u + 1] + completes[u + 1];
  return before;
}

}  // namespace

StepPrediction PredictZero(const Profile& p, const std::vector<UnitCost>& cost, const Topology& t, double cap_mb,
                           int stage, int replicas, bool overlap_optimizer) {
  const MeshTopology mesh = SplitTopology(t, t.world() / std::max(1, replicas));
  if (stage == 3) return PredictZero3(p, cost, t, mesh, overlap_optimizer);
  const Tensors tensors = TensorsOf(p);
  const auto buckets = ReducerBuckets(tensors.bytes, cap_mb * kMiB, FirstCap(cap_mb));
  StepBuilder step(p, t);
  // The previous step's updated slices, gathered in forward order (the last
  // gradient-ready bucket holds the first units) once the buffers are
  // broadcast; each unit's forward waits for the buckets holding its parameters.
  const std::vector<int> broadcasts = step.BufferBroadcasts();
  std::vector<std::vector<int>> unit_waits(cost.size());
  for (int b = static_cast<int>(buckets.size()) - 1; b >= 0; --b) {
    const int id = step.Collective(Collective::kAllGather, BucketBytes(buckets[b], tensors), broadcasts, &mesh.group);
    for (int i : buckets[b]) unit_waits[tensors.unit[i]].push_back(id);
  }
  for (size_t u = 0; u < cost.size(); ++u) step.Compute(cost[u].forward_ms, unit_waits[u]);
  BackwardThenStep(p, cost, tensors, buckets, Collective::kReduceScatter, mesh.group.world(), overlap_optimizer, &step,
                   &mesh);
  return step.Finish();
}

StepPrediction PredictDp(const Profile& p, const std::vector<UnitCost>& cost, const Topology& t) {
  const double params = AllParamBytes(p);
  double compute = p.step_overhead_ms;
  for (const UnitCost& c : cost) compute += c.forward_ms + c.backward_ms;
  const int g = t.per_node;
  const double comm = Ms(TopologySeconds(t, Collective::kBroadcast, params)) +
                      (g - 1) * Ms(CollectiveSeconds(t.intra, Collective::kP2P, 2, params));
  const double opt = OptimizerMs(p, params);
  StepPrediction out;
  out.compute_ms = compute + opt;
  out.exposed_comm_ms = comm;
  out.step_ms = compute + opt + comm;
  return out;
}

namespace {

// The unit times at the micro-batch size as pmp's split search takes them.
UnitTimes AsUnitTimes(const std::vector<UnitCost>& cost) {
  UnitTimes t;
  for (const UnitCost& c : cost) t.total_ms.push_back(c.forward_ms + c.backward_ms), t.forward_ms.push_back(c.forward_ms);
  return t;
}

// The link between two devices of the topology (0 ms on the same device).
double HandOffMs(const Topology& t, int from, int to, double bytes) {
  if (from == to) return 0;
  const Link& link = from / t.per_node == to / t.per_node ? t.intra : t.inter;
  return Ms(CollectiveSeconds(link, Collective::kP2P, 2, bytes));
}

void CheckPipelineShape(const Profile& p, const StepQuery& q, PipelineSchedule schedule, int S, int V, int M) {
  const int units = static_cast<int>(p.units.size());
  if (S * V > units)
    throw ConfigError(fmt::format("--strategy={} on {} devices{}: a pipeline of {} stages needs as many units, and "
                                  "the profile's {} has {}; accepted: at most {} devices", q.strategy, S,
                                  V > 1 ? fmt::format(" x {} chunks", V) : "", S * V, p.model, units, units / V));
  if (q.batch % M != 0)
    throw ConfigError(fmt::format("--chunks={}: must divide the batch {}", M, q.batch));
  if (M < MinMicroBatches(schedule, S) || (NeedsGroupsOfDevices(schedule) && M % S != 0))
    throw ConfigError(fmt::format("--chunks={}: --schedule={} on {} devices needs at least {} micro-batches{}", M,
                                  PipelineScheduleName(schedule), S, MinMicroBatches(schedule, S),
                                  NeedsGroupsOfDevices(schedule) ? fmt::format(", a multiple of {}", S) : ""));
}

int DefaultMicroBatches(const StepQuery& q, PipelineSchedule schedule, int S) {
  const int want = std::max(2 * S, MinMicroBatches(schedule, S));
  return q.batch % want == 0 ? want : static_cast<int>(std::min<int64_t>(q.batch, S));
}

// Per device: the chunk times of `table` with `counts`, hand-offs included
// when `t` is given.
ChunkTimes PipelineChunkTimes(const Profile& p, const PipelineTable& table, const std::vector<int>& counts,
                              const std::vector<UnitCost>& cost, int64_t micro, const Topology* t) {
  std::vector<double> forward, backward;
  int first = 0;
  for (int n : counts) {
    double f = 0, b = 0;
    for (int u = first; u < first + n; ++u) f += cost[u].forward_ms, b += cost[u].backward_ms;
    forward.push_back(f), backward.push_back(b);
    first += n;
  }
  ChunkTimes times = SplitChunkTimes(forward, backward);
  if (!t) return times;
  int last = -1;
  for (int c = 0; c + 1 < static_cast<int>(counts.size()); ++c) {
    last += counts[c];
    // The activation's way there and its gradient's way back, beside the computation.
    times.handoff.push_back(HandOffMs(*t, table.DeviceOf(c), table.DeviceOf(c + 1),
                                      p.units[last].output_bytes * static_cast<double>(micro)));
  }
  return times;
}

// Per device: the parameter bytes of its chunks; per chunk: its first and
// last unit.
struct DeviceBytes {
  std::vector<double> params;
  std::vector<std::pair<size_t, size_t>> chunk_units;
};
DeviceBytes BytesPerDevice(const Profile& p, const PipelineTable& table, const std::vector<int>& counts) {
  DeviceBytes d{std::vector<double>(static_cast<size_t>(table.devices), 0), {}};
  int first = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    double pb = 0;
    for (int u = first; u < first + counts[c]; ++u) pb += p.units[u].ParamBytes();
    d.params[static_cast<size_t>(table.DeviceOf(static_cast<int>(c)))] += pb;
    d.chunk_units.emplace_back(static_cast<size_t>(first), static_cast<size_t>(first + counts[c] - 1));
    first += counts[c];
  }
  return d;
}

// The backward's peak on `device`: at each of its backwards, one
// micro-batch's walk through that chunk (BackwardPeakBytes) beside the
// activations of every other (micro-batch, chunk) it holds then, each at its
// own chunk's bytes. Why per backward and per chunk: under interleaving and
// the V a device's chunks differ, and its peak can come in a chunk with few
// activations but large weights (their gradients) while a larger chunk's
// micro-batches wait; pricing the most pairs held at the largest chunk missed
// it (interleaved measured 1.11-1.14x that prediction).
double DeviceActivationPeakBytes(const Profile& p, const PipelineTable& table, const DeviceBytes& bytes, int device,
                                 double micro) {
  std::vector<double> chunk_bytes;  // per image
  for (const auto& [first, last] : bytes.chunk_units) {
    double all = 0;
    for (size_t u = first; u <= last; ++u) all += p.units[u].activation_bytes;
    chunk_bytes.push_back(all);
  }
  double peak = 0;
  for (const BackwardHeld& b : HeldAtBackwards(table, device)) {
    double others = -chunk_bytes[static_cast<size_t>(b.chunk)] * micro;  // the running one is the walk's
    for (size_t c = 0; c < b.held.size(); ++c) others += b.held[c] * chunk_bytes[c] * micro;
    const auto [first, last] = bytes.chunk_units[static_cast<size_t>(b.chunk)];
    peak = std::max(peak, BackwardPeakBytes(p, first, last, micro, 0, GradsHeld::kApart) + others);
  }
  return peak;
}

// Memory of the fullest device: its chunks' parameters and optimizer state,
// and its backward's peak (DeviceActivationPeakBytes; the pipelines zero
// .grad rather than free it, so it is a model state here).
void SetPipelineMemory(const Profile& p, const PipelineTable& table, const DeviceBytes& bytes, int64_t micro,
                       int64_t batch, StepPrediction* out) {
  const std::vector<double>& params = bytes.params;
  const ModelStateBytes per = StateBytes(p);
  for (size_t d = 0; d < params.size(); ++d) {
    const auto elements = static_cast<int64_t>(params[d] / static_cast<double>(p.element_bytes));
    const double states = ZeroExpectedMb(0, elements, 1, per);  // .grad too: zeroed, never freed
    const double acts =
        DeviceActivationPeakBytes(p, table, bytes, static_cast<int>(d), static_cast<double>(micro)) / kMiB;
    if (states + acts > out->memory_mb) {
      out->memory_mb = states + acts;
      out->states_mb = states;
      out->activation_mb_per_image = acts / static_cast<double>(batch);
    }
  }
}

// --overlap-optimizer (stages in one process): every device's optimizer work
// is done by the devices whose rows have ended, from the first one's end (a
// stage's parameters become final during its last action, about as long as
// the others' drain), each idle device taking an equal share; the step ends
// when the work is done, and not before the schedule's makespan.
double PooledOptimizerEnd(const Profile& p, const PipelineSimulation& with, const DeviceBytes& bytes) {
  double left = 0;
  for (double b : bytes.params) left += OptimizerMs(p, b);
  std::vector<double> finish = with.finish;
  std::sort(finish.begin(), finish.end());
  for (size_t k = 1; k <= finish.size(); ++k) {  // k devices idle from finish[k - 1]
    const double until = k < finish.size() ? finish[k] : std::numeric_limits<double>::infinity();
    const double done = finish[k - 1] + left / static_cast<double>(k);
    if (done <= until) return std::max(with.makespan, done);
    left -= (until - finish[k - 1]) * static_cast<double>(k);
  }
  return with.makespan;
}

// pp x dp: each device's gradients all-reduced across the replicas once its
// last action ends (`with`: the simulation with hand-offs), then its
// optimizer; the step ends with the last device's. A node's devices finish
// at different times, so their all-reduces share the node's link only while
// they overlap (SharedLinkEnds over the link one replicate group has alone).
// Without replicas, the makespan and the slowest optimizer (as validated).
double PipelineStepEnd(const Profile& p, const PipelineSimulation& with, const DeviceBytes& bytes,
                       const MeshTopology& mesh, bool overlap_optimizer) {
  double end = 0;
  if (mesh.replicas.world() == 1) {
    if (overlap_optimizer) return PooledOptimizerEnd(p, with, bytes);
    for (double b : bytes.params) end = std::max(end, OptimizerMs(p, b));
    return with.makespan + end;
  }
  const size_t devices = bytes.params.size(), per_node = std::max(1, mesh.group.per_node);
  for (size_t first = 0; first < devices; first += per_node) {  // the devices of one node
    std::vector<double> start, alone;
    for (size_t d = first; d < std::min(devices, first + per_node); ++d) {
      start.push_back(with.finish[d]);
      alone.push_back(Ms(TopologySeconds(mesh.alone, Collective::kAllReduce, bytes.params[d])));
    }
    const std::vector<double> reduced = SharedLinkEnds(start, alone, mesh.crossings);
    for (size_t i = 0; i < reduced.size(); ++i)
      end = std::max(end, reduced[i] + OptimizerMs(p, bytes.params[first + i]));
  }
  return end;
}

StepPrediction PredictPipeline(const Profile& p, const StepQuery& q, const StrategyTraits& traits) {
  const bool mp = !traits.micro_batches;  // one stage at a time: one micro-batch, GPipe's order
  const int R = q.replicas;
  const MeshTopology mesh = SplitTopology(q.topology, q.topology.world() / R);
  const int S = mesh.group.world();
  const PipelineSchedule schedule = mp ? PipelineSchedule::kGPipe : q.schedule;
  const int V = mp ? 1 : q.virtual_stages > 0 ? q.virtual_stages : ChunksPerDevice(schedule, 0);
  const int M = mp ? 1 : q.micro_batches > 0 ? q.micro_batches : DefaultMicroBatches(q, schedule, S);
  CheckPipelineShape(p, q, schedule, S, V, M);
  const PipelineTable table = BuildPipelineTable(schedule, S, V, M);
  const int64_t micro = q.batch / M;
  StepPrediction out;
  const std::vector<UnitCost> cost = p.CostAt(micro, &out.scaled);
  const bool given = q.split.size() == static_cast<size_t>(S * V) &&
                     std::accumulate(q.split.begin(), q.split.end(), 0) == static_cast<int>(cost.size()) &&
                     std::all_of(q.split.begin(), q.split.end(), [](int c) { return c >= 1; });
  const std::vector<int> counts = given ? q.split : FastestSplit(table, AsUnitTimes(cost));
  const PipelineSimulation plain = SimulatePipeline(table, PipelineChunkTimes(p, table, counts, cost, micro, nullptr));
  const PipelineSimulation with = SimulatePipeline(table, PipelineChunkTimes(p, table, counts, cost, micro, &mesh.group));
  if (plain.deadlock || with.deadlock)
    throw ConfigError(fmt::format("--schedule={}: its table deadlocks on {} devices", PipelineScheduleName(schedule), S));
  const DeviceBytes bytes = BytesPerDevice(p, table, counts);
  double opt = 0;  // the slowest device's optimizer
  for (double b : bytes.params) opt = std::max(opt, OptimizerMs(p, b));
  const double busiest = *std::max_element(plain.busy.begin(), plain.busy.end());
  const double end = PipelineStepEnd(p, with, bytes, mesh, q.overlap_optimizer);
  if (q.overlap_optimizer && R == 1) opt = std::max(0.0, end - with.makespan);  // what the drains do not hide
  out.step_ms = end + p.step_overhead_ms;
  out.compute_ms = busiest + opt + p.step_overhead_ms;
  out.bubble_ms = plain.makespan - busiest;
  out.exposed_comm_ms = std::max(0.0, out.step_ms - (plain.makespan + opt + p.step_overhead_ms));
  out.images = q.batch * R;
  out.micro_batches = M, out.virtual_stages = V;
  SetPipelineMemory(p, table, bytes, micro, q.batch, &out);
  return out;
}

// The data-parallel families: every device runs the whole model on its batch.
StepPrediction PredictDataParallel(const Profile& p, const StepQuery& q, const StrategyTraits& traits) {
  const int world = q.topology.world();
  StepPrediction out;
  bool scaled = false;
  const std::vector<UnitCost> cost = p.CostAt(q.batch, &scaled);
  if (traits.family == Family::kDataInProcess) out = PredictDp(p, cost, q.topology);
  else if (traits.family == Family::kSharded)
    out = PredictZero(p, cost, q.topology, q.bucket_cap_mb, traits.zero_stage, q.replicas, q.overlap_optimizer);
  else out = PredictDdp(p, cost, q.topology, q.bucket_cap_mb, q.overlap_optimizer);
  out.scaled = scaled;
  out.images = q.batch * world;
  // dp keeps one optimizer on its first device; the others one per rank,
  // sharded over a shard group of world / replicas.
  const int holders = traits.family == Family::kDataInProcess ? 1 : world / q.replicas;
  const bool alltoall = q.reduce_by_alltoall && traits.family == Family::kSharded && holders > 1;
  SetDataParallelMemory(p, traits.family, traits.zero_stage, holders, q.batch,
                        q.gradient_as_bucket_view && traits.family == Family::kDataRanks, q.grad_accum,
                        alltoall ? AlltoallCopiesBefore(p, q.bucket_cap_mb, traits.zero_stage) : std::vector<double>{},
                        &out);
  return out;
}

using FamilyModel = StepPrediction (*)(const Profile&, const StepQuery&, const StrategyTraits&);

// How each family's step is modelled: the step model's dispatch.
const std::map<Family, FamilyModel>& FamilyModels() {
  static const std::map<Family, FamilyModel> models = {
      {Family::kSingle, PredictDataParallel},   {Family::kDataInProcess, PredictDataParallel},
      {Family::kDataRanks, PredictDataParallel}, {Family::kSharded, PredictDataParallel},
      {Family::kPipeline, PredictPipeline},
  };
  return models;
}

}  // namespace

const std::vector<std::string>& ModelledStrategies() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& t : StrategyTraitsTable())
      if (FamilyModels().count(t.family)) out.push_back(t.name);
    return out;
  }();
  return names;
}

int MinimumWorld(const std::string& strategy) {
  const StrategyTraits* t = FindTraits(strategy);
  return t ? t->min_devices() : 1;
}

StepPrediction PredictStep(const Profile& p, const StepQuery& q) {
  const auto& all = ModelledStrategies();
  if (std::find(all.begin(), all.end(), q.strategy) == all.end())
    throw ConfigError(fmt::format("--strategies: '{}' is not accepted; accepted: {}", q.strategy,
                                  fmt::join(all, ", ")));
  const StrategyTraits& traits = *FindTraits(q.strategy);
  const int world = q.topology.world();
  const bool one_device = traits.family == Family::kSingle;
  if (world < traits.min_devices() || (one_device && world != 1))
    throw ConfigError(fmt::format("--strategy={} on {} device{}: {}", q.strategy, world, world == 1 ? "" : "s",
                                  one_device ? fmt::format("{} runs on exactly 1 device", q.strategy)
                                             : fmt::format("needs at least {} devices", traits.min_devices())));
  if (traits.family == Family::kDataInProcess && q.topology.nodes > 1)
    throw ConfigError(fmt::format("--strategy={} on {} nodes: {} drives the devices of one node from one process",
                                  q.strategy, q.topology.nodes, q.strategy));
  if (q.batch < 1) throw ConfigError(fmt::format("--batch-size={}: must be at least 1", q.batch));
  StepQuery meshed = q;
  meshed.replicas = q.replicas > 0 ? q.replicas : traits.replicate_by_node ? q.topology.nodes : 1;
  if (!traits.Reads("--replicate-degree")) meshed.replicas = 1;
  const int R = meshed.replicas, least = traits.family == Family::kPipeline ? 2 : 1;
  if (R < 1 || world % R != 0 || world / R < least)
    throw ConfigError(fmt::format("--strategy={} on {} devices replicated {} times: the replicas must divide the "
                                  "devices into groups of at least {}", q.strategy, world, R, least));
  return FamilyModels().at(traits.family)(p, meshed, traits);
}

double PredictOneDeviceMemoryMb(const Profile& profile, int64_t batch) {
  StepPrediction out;
  SetDataParallelMemory(profile, Family::kSingle, 0, 1, batch, /*bucket_views=*/false, /*micro_steps=*/1,
                        /*alltoall_copies=*/{}, &out);
  return out.memory_mb;
}

StepPrediction PredictRecomputedMemory(const Profile& profile, const StepQuery& query) {
  Profile held = profile;
  double transient = 0;  // per image
  for (UnitProfile& u : held.units) {
    transient = std::max(transient, u.activation_bytes - u.output_bytes);
    u.activation_bytes = std::min(u.activation_bytes, u.output_bytes);
  }
  StepPrediction s = PredictStep(held, query);
  const int64_t images = s.micro_batches > 0 ? query.batch / s.micro_batches : query.batch;  // one forward's
  const double extra_mb = transient * static_cast<double>(images) / kMiB;
  s.memory_mb += extra_mb;
  s.activation_mb_per_image += extra_mb / static_cast<double>(std::max<int64_t>(1, query.batch));
  return s;
}

}  // namespace ddpbench
