// The run's own expected throughput (expected.h).
#include "app/expected.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "app/calibrate.h"
#include "base/config.h"
#include "harness/dist.h"
#include "base/log.h"
#include "app/run_result.h"
#include "app/step_loop.h"
#include "projection/step_model.h"
#include "strategies/registry.h"
#include "strategies/pipeline/stages.h"

namespace ddpbench {

namespace {

// A copy from device 0 to device 1 at a few sizes, fitted to a point-to-point
// link: what a one-process strategy's hand-off or replica copy costs.
Link MeasureCopyLink(const std::vector<torch::Device>& devices) {
  std::vector<std::pair<double, double>> points;
  for (int64_t bytes : {int64_t{256} << 10, int64_t{4} << 20, int64_t{16} << 20}) {
    torch::Tensor src = torch::ones({bytes / 4}, torch::TensorOptions().device(devices[0]));
    torch::Tensor dst = torch::empty({bytes / 4}, torch::TensorOptions().device(devices[1]));
    std::vector<double> s;
    for (int r = 0; r < 6; ++r) {
      SynchronizeDevices(devices);
      const auto t0 = std::chrono::steady_clock::now();
      dst.copy_(src);
      SynchronizeDevices(devices);
      if (r > 0) s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    points.emplace_back(static_cast<double>(bytes), Median(s));
  }
  return FitLink(points, Collective::kP2P, 2, "measured");
}

int ExtraInt(const std::map<std::string, std::string>& extras, const char* key, int64_t fallback) {
  const auto it = extras.find(key);
  if (it == extras.end() || it->second.empty()) return static_cast<int>(fallback);
  try {
    return std::stoi(it->second);
  } catch (const std::exception&) {
    return static_cast<int>(fallback);
  }
}

StepQuery QueryOf(const RunConfig& c, const DistContext& dist, const std::map<std::string, std::string>& extras,
                  const Link& link) {
  StepQuery q;
  q.strategy = c.strategy;
  q.batch = c.batch_size;
  q.bucket_cap_mb = c.bucket_cap_mb;
  q.topology.per_node = dist.world > 1 ? dist.local_world : c.gpus;
  q.topology.nodes = dist.world > 1 ? dist.world / std::max(1, dist.local_world) : 1;
  q.topology.intra = q.topology.inter = link;
  const auto schedule = extras.find("schedule");
  q.schedule = ParsePipelineSchedule(schedule != extras.end() && !schedule->second.empty() ? schedule->second : c.schedule);
  q.micro_batches = ExtraInt(extras, "chunks", c.chunks);
  q.virtual_stages = ExtraInt(extras, "virtual_stages", c.virtual_stages);
  q.replicas = dist.mesh.replicas;  // 1 without a mesh
  q.overlap_optimizer = c.overlap_optimizer;
  q.gradient_as_bucket_view = c.gradient_as_bucket_view;
  q.grad_accum = c.grad_accum;
  q.reduce_by_alltoall = c.zero_reduce == "reduce-scatter" && dist.strategy_group() &&
                         BackendName(*dist.strategy_group()) == "gloo";
  const auto split = extras.find("split");  // a pipeline's own (ignored if the profile's units differ)
  if (split != extras.end())
    for (size_t at = 0; at < split->second.size();) {
      const size_t comma = std::min(split->second.find(',', at), split->second.size());
      try {
        q.split.push_back(std::stoi(split->second.substr(at, comma - at)));
      } catch (const std::exception&) {
        q.split.clear();
        break;
      }
      at = comma + 1;
    }
  return q;
}

bool OnOneDevice(const RunConfig& c, int world) { return std::max(world, c.gpus) == 1; }

// `dist` narrowed to one of its mesh's groups (`group`, where this rank is
// `rank` of `world`): what is measured over it stays inside the group.
DistContext Narrowed(const DistContext& dist, const c10::intrusive_ptr<c10d::ProcessGroup>& group, int rank,
                     int world) {
  DistContext sub = dist;
  sub.group = group, sub.rank = rank, sub.world = world;
  sub.mesh = MeshCoords{}, sub.mesh_group = sub.replicate_group = {};
  return sub;
}

// The link between the replicas as measured: every replicate group crossing
// at once, and, for a pipeline (whose stages' all-reduces start at different
// times), one group crossing alone.
struct ReplicaLinks {
  Link together;
  std::optional<Link> alone;
};

// One replicate group after another measures its all-reduce while the
// others wait: this rank's group's figure. Collective over the world.
Link MeasureAloneInTurn(DistContext& dist, DistContext& replicas, const std::vector<int64_t>& sizes) {
  std::optional<Link> mine;
  for (int g = 0; g < dist.mesh.group_size; ++g) {
    if (dist.mesh.index == g) mine = MeasureAllReduce(replicas, sizes, LinkEffort{});
    dist.Barrier();
  }
  return *mine;
}

// How many replicate groups of a node cross at one group's full rate at once:
// the ratio of a 4 MiB all-reduce's times alone and together, times the
// groups that crossed together (1 .. group size).
int CrossingsOf(const ReplicaLinks& links, int group_size, int replicas) {
  const double bytes = 4.0 * (1 << 20);
  const double alone = CollectiveSeconds(*links.alone, Collective::kAllReduce, replicas, bytes);
  const double together = CollectiveSeconds(links.together, Collective::kAllReduce, replicas, bytes);
  return std::clamp(static_cast<int>(std::lround(group_size * alone / together)), 1, group_size);
}

// The run's profile measured after it: with a device mesh the units and the
// group's collectives (a shard group's, a pipeline's hand-offs) over the
// group's ranks, and the link between replicas by the replicate groups'
// all-reduce (`inter`), each group measuring beside the others as in the run.
Profile MeasureRunProfile(const RunConfig& c, const ResNetOptions& options, const std::vector<torch::Device>& devices,
                          DistContext& dist, const StrategyInfo& info, int micro, std::optional<ReplicaLinks>* inter) {
  std::vector<int64_t> batches{c.batch_size};
  if (micro > 1 && c.batch_size % micro == 0) batches.push_back(c.batch_size / micro);
  const std::vector<int64_t> sizes{64 << 10, 1 << 20, 4 << 20};
  const bool zero = info.family == Family::kSharded;  // the only ones to reduce-scatter and all-gather
  const bool pipeline = info.family == Family::kPipeline;
  if (!dist.mesh_group || dist.mesh.replicas < 2) {
    Profile p = MeasureProfile(c, options, devices.front(), dist, batches, sizes, LinkEffort{}, zero, pipeline);
    if (!p.link && devices.size() > 1 && dist.world == 1) p.link = MeasureCopyLink(devices);
    return p;
  }
  DistContext group = Narrowed(dist, dist.mesh_group, dist.mesh.index, dist.mesh.group_size);
  Profile p = MeasureProfile(c, options, devices.front(), group, batches, sizes, LinkEffort{}, zero, pipeline);
  DistContext replicas = Narrowed(dist, dist.replicate_group, dist.mesh.replica, dist.mesh.replicas);
  ReplicaLinks links{MeasureAllReduce(replicas, sizes, LinkEffort{}), std::nullopt};
  if (pipeline) links.alone = MeasureAloneInTurn(dist, replicas, sizes);
  if (dist.is_root()) {
    LogInfo("link between the replicas ({} ranks): alpha {:.1f} us, {:.3f} GB/s", dist.mesh.replicas,
            links.together.alpha_s * 1e6, links.together.bandwidth / 1e9);
    if (links.alone)
      LogInfo("link between the replicas, one replicate group crossing alone: alpha {:.1f} us, {:.3f} GB/s; {} of "
              "a node's groups cross at that rate at once",
              links.alone->alpha_s * 1e6, links.alone->bandwidth / 1e9,
              CrossingsOf(links, dist.mesh.group_size, dist.mesh.replicas));
  }
  *inter = links;
  return p;
}

// A one-process strategy whose devices at work at once (dp's replicas,
// pmp's stages) are one GPU (--oversubscribe): the model gives every device
// its own GPU, so its figure would be the sharing, not the strategy (dp on
// an H100: 0.47 of it). mp runs one stage at a time: sharing costs it nothing.
bool SharesOneGpu(const RunConfig& c, const std::vector<torch::Device>& devices) {
  if (!FindStrategy(c.strategy).info.devices_at_once()) return false;
  for (size_t i = 1; i < devices.size(); ++i)
    if (devices[i].is_cuda() && devices[i] == devices.front()) return true;
  return false;
}

}  // namespace

bool ExpectsThroughput(const RunConfig& c, int world) {
  const StrategyInfo& info = FindStrategy(c.strategy).info;
  if (c.expected == "off" || info.family == Family::kSingle || c.data_only) return false;
  // One rank of a one-rank-per-device strategy (ddp, zero1/2/3): its step against its own parts
  // (units, optimizer, step overhead) says what the strategy's machinery
  // costs where there is nothing to communicate.
  return !OnOneDevice(c, world) || info.parallelism() == Parallelism::kDataMultiProcess;
}

void CheckExpectedProfile(const RunConfig& c) {
  if (c.expected == "auto" || c.expected == "off") return;
  const Profile p = ReadProfile(c.expected);
  CheckProfileMatches(p, c.model, c.width, RunImageSize(c), PrecisionName(c.amp), "--expected=" + c.expected);
  if (!p.link)
    throw ConfigError(fmt::format("--expected={}: the profile has no measured link; calibrate with "
                                  "--strategy=ddp --gpus=2", c.expected));
}

std::map<std::string, std::string> ExpectThisRun(const RunConfig& c, const ResNetOptions& options,
                                                 const std::vector<torch::Device>& devices, DistContext& dist,
                                                 const std::map<std::string, std::string>& extras) {
  if (FindStrategy(c.strategy).info.family == Family::kSingle && c.expected != "off" && !c.data_only) {
    // One device: its step is its parts, nothing to expect of the throughput; its memory is predicted.
    const double mb = PredictOneDeviceMemoryMb(MeasureMemoryProfile(c, options, devices.front()), c.batch_size);
    return {{"memory_expected_mb", fmt::format("{:.1f}", mb)}};
  }
  if (!ExpectsThroughput(c, dist.world)) return {};
  if (SharesOneGpu(c, devices)) {
    if (dist.is_root()) LogWarn("expected_img_s left empty: --strategy={}'s devices are one GPU", c.strategy);
    return {};
  }
  const StrategyInfo& info = FindStrategy(c.strategy).info;
  const bool pipeline = info.family == Family::kPipeline;
  const int micro = pipeline ? ExtraInt(extras, "chunks", 1) : 1;
  Profile p;
  std::optional<ReplicaLinks> inter;  // with a mesh: the link between the replicas
  std::string from;
  if (c.expected == "auto") {
    try {
      p = MeasureRunProfile(c, options, devices, dist, info, micro, &inter);
    } catch (const std::invalid_argument& e) {  // a fit the timings could not give (a loaded machine)
      LogWarn("expected_img_s left empty: the link could not be fitted ({})", e.what());
      return {};
    }
    from = "measured after the run";
  } else {
    p = ReadProfile(c.expected);
    from = c.expected;
  }
  if (!p.link && OnOneDevice(c, dist.world)) p.link = Link{"none", 0, 0, "one device: no collectives", {}};
  if (!p.link && inter && dist.mesh.group_size == 1)  // groups of one rank: the replicate link joins every rank
    p.link = inter->together;
  if (!p.link) return {};
  try {
    StepQuery q = QueryOf(c, dist, extras, *p.link);
    if (inter) q.topology.inter = inter->together;
    if (inter && inter->alone) {  // a pipeline: the link one group has alone, and how many share it at that rate
      q.topology.inter = *inter->alone;
      q.topology.nics = CrossingsOf(*inter, dist.mesh.group_size, dist.mesh.replicas);
    }
    const StepPrediction s = PredictStep(p, q);
    if (dist.is_root())
      LogInfo("expected: {:.1f} img/s ({}: step {:.2f} ms = compute {:.2f} + exposed communication {:.2f} + bubble "
              "{:.2f})", s.ImagesPerSecond(), from, s.step_ms, s.compute_ms, s.exposed_comm_ms, s.bubble_ms);
    return {{"expected_img_s", fmt::format("{:.1f}", s.ImagesPerSecond())},
            {"memory_expected_mb", fmt::format("{:.1f}", s.memory_mb)},
            {"expected_term", s.LargestTerm()},
            {"expected_from", from}};
  } catch (const ConfigError& e) {
    if (dist.is_root()) LogWarn("expected_img_s left empty: {}", e.what());
    return {};
  }
}

}  // namespace ddpbench
