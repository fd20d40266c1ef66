// The measurements behind a projection profile (calibrate.h).
#include "app/calibrate.h"

#include <torch/torch.h>

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "harness/context.h"
#include "harness/cpu_pinning.h"
#include "harness/cuda_support.h"
#include "harness/dist.h"
#include "base/log.h"
#include "harness/memory.h"
#include "app/run_result.h"
#include "harness/training.h"
#include "strategies/device_workers.h"
#include "strategies/pipeline/stages.h"

namespace ddpbench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTrim = 0.15;  // each end's share of rounds left out of a mean

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A batch of the run's shape and random labels on `device`.
std::pair<torch::Tensor, torch::Tensor> RandomBatch(const ResNet& model, const RunConfig& config, torch::Device device) {
  const int64_t size = RunImageSize(config);
  return {torch::randn({config.batch_size, model->options().in_channels, size, size}).to(device, model->options().dtype),
          torch::randint(model->options().num_classes, {config.batch_size},
                         torch::TensorOptions().dtype(torch::kLong).device(device))};
}

// Per unit: bytes of each trainable tensor, and per image the bytes its
// forward leaves allocated until the backward (activations kept for the
// gradient, and its output) and the bytes of its output.
void MeasureUnitBytes(ResNet model, const RunConfig& config, torch::Device device, Profile* p) {
  const int64_t batch = config.batch_size;
  torch::Tensor x = RandomBatch(model, config, device).first;
  std::vector<torch::Tensor> keep;  // every output stays alive, as in a real forward
  size_t u = 0;
  for (auto& module : *model->units()) {
    UnitProfile& unit = p->units[u++];
    for (const auto& t : module.ptr()->parameters())
      if (t.requires_grad()) unit.param_bytes.push_back(static_cast<double>(t.numel() * t.element_size()));
    WaitForCurrentStream(device);
    const int64_t before = AllocatedBytesNow(device, 0);
    x = module.forward(x);
    WaitForCurrentStream(device);
    unit.activation_bytes = static_cast<double>(std::max<int64_t>(0, AllocatedBytesNow(device, 0) - before)) / batch;
    unit.output_bytes = static_cast<double>(x.numel() * x.element_size()) / batch;
    keep.push_back(x);
  }
}

// The most each unit's backward allocates at once above what is allocated
// when it starts, at `images` images: each unit runs on the previous one's
// output, its parameters' .grad already allocated (so the figure is the
// backward's own, not the gradients the model counts apart).
std::vector<double> UnitBackwardPeaks(ResNet model, const RunConfig& config, int64_t images, torch::Device device) {
  RunConfig at = config;
  at.batch_size = images;
  torch::Tensor x = RandomBatch(model, at, device).first;
  for (auto& t : model->parameters())
    if (t.requires_grad()) t.mutable_grad() = torch::zeros_like(t);
  std::vector<double> peaks;
  for (auto& module : *model->units()) {
    torch::Tensor in = x.detach().requires_grad_(!peaks.empty());
    torch::Tensor y = module.forward(in);
    torch::Tensor grad = torch::ones_like(y);
    WaitForCurrentStream(device);
    const int64_t before = AllocatedBytesNow(device, 0);
    ResetPeakMemory({device});
    y.backward(grad);
    WaitForCurrentStream(device);
    const double peak = MeasureDeviceMemory(device, 0).peak_allocated_mb * 1024.0 * 1024.0;
    peaks.push_back(std::max(0.0, peak - static_cast<double>(before)));
    x = y.detach();
  }
  for (auto& t : model->parameters()) t.mutable_grad() = torch::Tensor();
  return peaks;
}

// UnitProfile::backward_bytes and backward_fixed_bytes: a line through the
// unit's backward peak at the batch and at a quarter of it (the weights' new
// gradients do not grow with the images). The line always passes through the
// peak at the batch itself: where the two points give a negative fixed part
// (a kernel's workspace that appears only above some batch, as oneDNN's AVX2
// weight gradient of 512-channel layers does: 9 MB at 1 image, 45 MB at 2),
// the line runs from zero to that peak; where they give a negative slope, it is
// flat at that peak. With --grad-accum the batch is what each backward runs
// (one micro-step's images), the only size its run's prediction reads.
void MeasureUnitBackwardBytes(ResNet model, const RunConfig& config, torch::Device device, Profile* p) {
  const int64_t large = config.batch_size / std::max<int64_t>(1, config.grad_accum);
  // The small point is a batch the model trains on: batch norm needs two
  // values per channel where the last stage's map is 1x1.
  const int64_t small = std::min(large, std::max(FewestTrainingImages(config, RunImageSize(config)), large / 4));
  const std::vector<double> at_large = UnitBackwardPeaks(model, config, large, device);
  const std::vector<double> at_small = large == small ? at_large : UnitBackwardPeaks(model, config, small, device);
  for (size_t u = 0; u < p->units.size(); ++u) {
    const BackwardLine line = FitBackwardLine(large, at_large[u], small, at_small[u]);
    p->units[u].backward_bytes = line.per_image;
    p->units[u].backward_fixed_bytes = line.fixed;
  }
}

// The bytes of each broadcast the data-parallel strategies make of the
// model's buffers before a forward (DistContext::BroadcastFromRoot through
// c10d::broadcast_coalesced: the buffers flattened into one tensor per dtype,
// in the order each dtype first appears; far below its 250 MiB bucket).
std::vector<double> BufferBroadcastBytes(const ResNet& model) {
  std::vector<std::pair<c10::ScalarType, double>> groups;
  for (const auto& b : model->buffers()) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == b.scalar_type(); });
    if (g == groups.end()) g = groups.insert(groups.end(), {b.scalar_type(), 0.0});
    g->second += static_cast<double>(b.numel() * b.element_size());
  }
  std::vector<double> bytes;
  for (const auto& [type, sum] : groups)
    if (sum > 0) bytes.push_back(sum);
  return bytes;
}

// One optimizer step of the whole model, in ms per MiB of parameters.
double MeasureOptimizer(const ResNet& model, const RunConfig& config, torch::Device device) {
  std::vector<torch::Tensor> params;
  for (const auto& t : model->parameters()) {
    torch::Tensor w = t.detach().clone().set_requires_grad(true);
    w.mutable_grad() = torch::ones_like(w);
    params.push_back(w);
  }
  // The run's optimizer and implementation (--optimizer-impl: fused on a GPU,
  // where a loop over ResNet-50's 161 tensors takes ten times as long).
  const std::unique_ptr<torch::optim::Optimizer> opt = MakeOptimizer(config, params, config.lr);
  double bytes = 0;
  for (const auto& t : params) bytes += static_cast<double>(t.numel() * t.element_size());
  for (int i = 0; i < 2; ++i) opt->step();
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    WaitForCurrentStream(device);
    const auto t0 = Clock::now();
    opt->step();
    WaitForCurrentStream(device);
    ms.push_back(SecondsSince(t0) * 1000);
  }
  return Median(ms) / (bytes / (1024.0 * 1024.0));
}

// A whole training step of `model` (zero the gradients, forward, loss,
// backward, optimizer) at the run's batch, the median of 6 after 2 untimed,
// minus its units and optimizer: what the step costs beyond them.
double MeasureStepOverhead(ResNet model, const RunConfig& config, torch::Device device, double units_ms,
                           double optimizer_ms) {
  const auto [x, y] = RandomBatch(model, config, device);
  const std::unique_ptr<torch::optim::Optimizer> opt = MakeOptimizer(config, model->parameters(), config.lr);
  std::vector<double> ms;
  for (int i = 0; i < 8; ++i) {
    WaitForCurrentStream(device);
    const auto t0 = Clock::now();
    opt->zero_grad();
    ClassificationLoss(model->forward(x), y).backward();
    opt->step();
    WaitForCurrentStream(device);
    if (i >= 2) ms.push_back(SecondsSince(t0) * 1000);
  }
  return std::max(0.0, Median(ms) - units_ms - optimizer_ms);
}

// One forward and backward of `model` on (x, y), in ms, while `beside` runs
// on another thread (none: alone), and the ms `beside` took. Every rank runs
// it at the same time (a 1-element all-reduce lines them up).
std::pair<double, double> ComputeBeside(ResNet model, const torch::Tensor& x, const torch::Tensor& y,
                                        DistContext& dist, const std::function<void()>& beside) {
  dist.AllReduceSum(0);  // start together
  std::thread comm;
  double beside_ms = 0;
  const auto t0 = Clock::now();
  if (beside) comm = std::thread([&] {
      beside();
      beside_ms = SecondsSince(t0) * 1000;
    });
  model->zero_grad();
  ClassificationLoss(model->forward(x), y).backward();
  WaitForCurrentStream(x.device());
  const double ms = SecondsSince(t0) * 1000;
  if (comm.joinable()) comm.join();
  return {ms, beside_ms};
}

// A cost a + b x MiB through two (MiB, ms) points, neither part below 0.
std::pair<double, double> PerCallAndPerMiB(const std::vector<std::pair<double, double>>& two) {
  const double per_mb = std::max(0.0, (two[1].second - two[0].second) / (two[1].first - two[0].first));
  return {std::max(0.0, two[0].second - per_mb * two[0].first), per_mb};
}

}  // namespace

// 10 rounds at least, quick sizes until their calls add up to 0.3 s, 45
// rounds of interference: the small-call terms a zero3 step pays some 30
// times move far less from one calibration to the next than with 10 and 15
// (research/projection-record.md, "Calibration timed to a minimum per point").
LinkEffort CalibrationEffort() { return {10, 0.3, 45}; }

std::vector<int64_t> CalibrationBatches(int64_t batch) {
  std::vector<int64_t> out{batch};
  // Not below 2: batch norm cannot train on one value per channel (one image at 1x1 after layer4).
  while (out.size() < 4 && out.back() % 2 == 0 && out.back() / 2 >= 2) out.push_back(out.back() / 2);
  return out;
}

namespace {

// Seconds of one call(i) at each of `count` sizes, every rank keeping the
// slowest rank's (a collective ends for all when the slowest rank's part
// does, so every rank fits the same link). Rounds over every size in turn
// (the first untimed): a moment when the machine is busy with something else
// slows one round of every size instead of every repeat of one size. In a
// round, each size is a burst: one call after the ranks meet, then kBurst
// calls back to back, timed together, as nccl-tests times its iterations and
// as a step issues its collectives one after another. A call that follows
// traffic is not one that follows a quiet link: over a tbf-shaped 100 Mbit/s
// TCP pair, Gloo's all-to-all of 0.5 MiB each way takes 80 ms back to back,
// 41-84 ms after a barrier. Kept: the mean without the fastest and slowest
// 15% of rounds. A step pays every call's cost, so the mean is what adds up;
// on a shared CPU some calls wait a scheduler tick for a core (0.4 or 3.5 ms
// for one size), where a median jumps between the two.
//
// Each size takes at least `repeats` rounds, and more (up to kMaxRounds)
// until its timed calls add up to `min_seconds` (by the untimed round's
// time; as google/benchmark runs a case to its minimum time): a mean of a
// few two-valued calls lands anywhere between the two values, and the small
// sizes, which a zero3 step issues some 30 times, cost little to repeat.
std::vector<double> TimeInRounds(DistContext& dist, size_t count, int repeats, double min_seconds,
                                 const std::function<void(size_t)>& call) {
  constexpr int kBurst = 2;
  constexpr int kMaxRounds = 80;
  std::vector<std::vector<double>> s(count);
  std::vector<int> rounds(count, repeats);
  auto burst = [&](size_t i) {
    dist.AllReduceSum(0);  // start together
    call(i);
    WaitForCurrentStream(dist.device);
    const auto t0 = Clock::now();
    for (int k = 0; k < kBurst; ++k) call(i);
    WaitForCurrentStream(dist.device);
    return SecondsSince(t0) / kBurst;
  };
  for (size_t i = 0; i < count; ++i) {  // the untimed round sizes the others, alike on every rank
    const double first = dist.AllReduceMax(burst(i));
    if (min_seconds > 0 && first > 0)
      rounds[i] = std::clamp(static_cast<int>(std::ceil(min_seconds / (kBurst * first))), repeats, kMaxRounds);
  }
  const int most = *std::max_element(rounds.begin(), rounds.end());
  for (int r = 0; r < most; ++r)
    for (size_t i = 0; i < count; ++i)
      if (r < rounds[i]) s[i].push_back(burst(i));
  std::vector<double> seconds;
  for (size_t i = 0; i < count; ++i) seconds.push_back(dist.AllReduceMax(TrimmedMean(s[i], kTrim)));
  return seconds;
}

// One call's tensors of `c` over a buffer of about `bytes` (S, rounded to
// split evenly over the ranks): the all-gather sends its slice and receives
// S; Gloo's all-to-all (reduce-scatter) and the all-reduce take S, NCCL's
// reduce-scatter returns a slice.
struct CallBuffers {
  double bytes;  // the whole buffer's
  at::Tensor in, out;
};
int64_t WholeNumel(const DistContext& dist, int64_t bytes) {
  return std::max<int64_t>(1, bytes / 4 / dist.world) * dist.world;
}
CallBuffers BuffersFor(const DistContext& dist, Collective c, int64_t bytes) {
  const auto options = torch::TensorOptions().device(dist.device);
  const int64_t numel = WholeNumel(dist, bytes);
  at::Tensor whole = torch::ones({numel}, options);
  at::Tensor slice = torch::ones({numel / dist.world}, options);
  return {static_cast<double>(numel * 4), c == Collective::kAllGather ? slice : whole,
          c == Collective::kAllGather || dist.backend == "gloo" ? torch::empty_like(whole) : torch::empty_like(slice)};
}

// Starts one `c` of `in` (the whole buffer, S bytes) as the strategies run it
// on this backend: zero_sharded reduces-scatters over Gloo with an all-to-all
// of the same bytes (Gloo has no reduce-scatter of one buffer).
c10::intrusive_ptr<c10d::Work> Issue(DistContext& dist, Collective c, at::Tensor& in, at::Tensor& out) {
  std::vector<at::Tensor> one{in};
  std::vector<int64_t> equal_splits;
  switch (c) {
    case Collective::kReduceScatter:
      return dist.backend == "gloo" ? dist.group->alltoall_base(out, in, equal_splits, equal_splits)
                                    : dist.group->_reduce_scatter_base(out, in);
    case Collective::kAllGather: return dist.group->_allgather_base(out, in);
    default: return dist.group->allreduce(one);
  }
}

}  // namespace

LinkMeasurement MeasureCollective(DistContext& dist, Collective c, const std::vector<int64_t>& sizes, int repeats,
                                  double min_seconds) {
  std::vector<CallBuffers> buffers;
  for (int64_t bytes : sizes) buffers.push_back(BuffersFor(dist, c, bytes));
  const std::vector<double> seconds =
      TimeInRounds(dist, sizes.size(), repeats, min_seconds,
                   [&](size_t i) { Issue(dist, c, buffers[i].in, buffers[i].out)->wait(); });
  LinkMeasurement m{CollectiveName(c), dist.world, {}};
  for (size_t i = 0; i < sizes.size(); ++i) m.points.emplace_back(buffers[i].bytes, seconds[i]);
  return m;
}

namespace {

// While alive, every thread of this process may run on every core the
// process was given before its rank was pinned (cpu_pinning.h; each thread's
// own mask given back at the end). A CPU rank is pinned to its
// core (PinRankToCores), its Gloo threads with it; timing a point-to-point
// exchange there times their wake-ups on that one core as much as the link:
// over a tbf-shaped pair, after the large rate-limited sizes, a pinned 4 KiB
// exchange took 1.0-2.0 ms in 7 rounds of 8 and an unpinned one 0.05-0.12 ms
// (research/rigs/p2p_pingpong.py --rounds [--pin]), and pmp's pinned stage ranks
// never pay that wait: their hand-offs land while the taker computes.
class AllCoresForNow {
 public:
  AllCoresForNow() {
    const cpu_set_t all = CoresBeforePinning();
    DIR* tasks = opendir("/proc/self/task");
    if (!tasks) return;
    while (const dirent* e = readdir(tasks)) {
      const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
      cpu_set_t mine;
      if (tid <= 0 || sched_getaffinity(tid, sizeof(mine), &mine) != 0) continue;
      if (sched_setaffinity(tid, sizeof(all), &all) == 0) saved_.emplace_back(tid, mine);
    }
    closedir(tasks);
  }
  ~AllCoresForNow() {
    for (auto& [tid, mask] : saved_) sched_setaffinity(tid, sizeof(mask), &mask);
  }
  AllCoresForNow(const AllCoresForNow&) = delete;
  AllCoresForNow& operator=(const AllCoresForNow&) = delete;

 private:
  std::vector<std::pair<pid_t, cpu_set_t>> saved_;
};

}  // namespace

LinkMeasurement MeasurePointToPoint(DistContext& dist, const std::vector<int64_t>& sizes, int repeats) {
  const auto options = torch::TensorOptions().device(dist.device);
  std::vector<at::Tensor> buffers, back;
  for (int64_t bytes : sizes) {
    buffers.push_back(torch::ones({std::max<int64_t>(1, bytes / 4)}, options));
    back.push_back(torch::empty_like(buffers.back()));
  }
  const int peer = dist.rank == 0 ? 1 : dist.rank == 1 ? 0 : -1;  // ranks 0 and 1; the others wait
  // Each rank posts its receive before anything is sent, as the pipeline
  // posts its next inputs ahead (stage_link.h): Gloo moves a message once
  // its receiver has posted, and the wait for that would be timed otherwise.
  auto exchange = [&](size_t i) {
    if (peer < 0) return;
    std::vector<at::Tensor> out{buffers[i]}, in{back[i]};
    CollectiveLabel label("point-to-point calibration");
    auto received = dist.group->recv(in, peer, 0);
    if (dist.rank == 0) {
      dist.group->send(out, peer, 0)->wait();
      received->wait();
    } else {
      received->wait();
      dist.group->send(out, peer, 0)->wait();
    }
  };
  std::vector<double> round_trip;
  {
    const AllCoresForNow unpinned;  // the link, not a pinned rank's wake-ups
    round_trip = TimeInRounds(dist, sizes.size(), repeats, 0, exchange);
  }
  LinkMeasurement m{CollectiveName(Collective::kP2P), 2, {}};
  for (size_t i = 0; i < sizes.size(); ++i)  // half a round trip: one hand-off
    m.points.emplace_back(static_cast<double>(buffers[i].numel() * 4), round_trip[i] / 2);
  return m;
}

namespace {

// Ms of one call of `c` alone at each of `sizes`: the link's own table
// point (`tables`, just measured), else measured here. The table's: the
// prediction prices a call by that point plus the loaded term, so at the
// measured sizes the two add up to the calls' own time beside the
// computation; an idle figure of its own would add its noise to the term (on
// this VM a 64 KiB all-gather alone came out 1.14 and 0.82 ms in two
// calibrations a minute apart).
std::vector<double> IdleMs(DistContext& dist, Collective c, const std::vector<int64_t>& sizes,
                           const std::vector<LinkMeasurement>& tables, const LinkEffort& effort) {
  std::vector<double> ms;
  for (const LinkMeasurement& t : tables) {
    if (t.collective != CollectiveName(c)) continue;
    for (int64_t bytes : sizes) {
      const double exact = static_cast<double>(WholeNumel(dist, bytes) * 4);
      for (const auto& [b, seconds] : t.points)
        if (b == exact) ms.push_back(seconds * 1000);
    }
  }
  if (ms.size() == sizes.size()) return ms;
  ms.clear();
  for (const auto& [b, seconds] : MeasureCollective(dist, c, sizes, 5, effort.min_seconds).points)
    ms.push_back(seconds * 1000);
  return ms;
}

// What collectives and the computation cost each other when they run at the
// same time (CPU devices: the same cores compute, move and sum the bytes).
// The computation alone, and with n calls of 64 KiB and of 4 MiB issued back
// to back beside it (n the same on every rank, small enough for them to end
// before it does): the computation's extra ms per call at the two sizes give
// the compute terms of Profile::CommTerms (per call and per MiB), and the
// calls' own time beside it, against the same calls alone (IdleMs), the
// loaded ones.
//
// One set of terms per group of collectives (`groups`, each group's kinds
// taken in turn), as the strategies issue them: ddp all-reduces, zero1/2/3
// all-gather and reduce-scatter (zero3 some 30 times a step), and one kind
// is no stand-in for another. On this 2-core VM, 64 KiB calls alone and
// beside a computation, 15 rounds of 8 (trimmed means, ms; torch.distributed
// over Gloo, loopback and a 2 Gbit/s tbf pair): all-reduce 1.4-1.8 alone
// (median 0.4: a heavy tail of slow calls) and 0.8-1.1 beside it on
// loopback, 0.3-0.6 slower beside it at 2 Gbit/s; all-gather and all-to-all
// 0.2-0.7 alone and 0.4-1.0 slower beside it on both. The all-reduce's terms
// priced zero3's calls until 2026-11-26: 0.0-0.5 ms per call on loopback and
// 0.6-1.7 over the shaped links, where zero3 was predicted 12-19% fast and
// 8-16% slow (research/projection-record.md).
//
// Each is a difference of two noisy timings, so the computation alone and
// beside each group's calls are timed in turn, effort.interference_rounds
// rounds, and their means compared (without each end's kTrim, as the link's
// table): a change of the machine's speed meanwhile moves all alike. Means,
// not medians: a step pays every call.
std::vector<Profile::CommTerms> MeasureInterference(ResNet model, const RunConfig& config, DistContext& dist,
                                                    const LinkEffort& effort,
                                                    const std::vector<std::vector<Collective>>& groups,
                                                    const std::vector<LinkMeasurement>& tables) {
  const auto [x, y] = RandomBatch(model, config, dist.device);
  const std::vector<int64_t> sizes{int64_t{64} << 10, int64_t{4} << 20};
  std::vector<double> first;
  for (int r = 0; r < 4; ++r) first.push_back(ComputeBeside(model, x, y, dist, nullptr).first);
  const double sizing = Median(std::vector<double>(first.begin() + 1, first.end()));  // the first untimed
  struct Calls {  // one group's calls of one size beside a computation
    std::vector<Collective> kinds;
    std::vector<CallBuffers> buffers;  // per kind
    int n = 0;
    double idle_ms = 0;                  // one call alone, the kinds in turn as issued
    std::vector<double> with, comm_ms;   // per round: the computation, and the calls, beside each other
  };
  std::vector<std::vector<Calls>> calls(groups.size());  // per group, per size
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::vector<double>> idle;  // per kind, per size: ms of one call alone
    for (Collective c : groups[g]) idle.push_back(IdleMs(dist, c, sizes, tables, effort));
    for (size_t i = 0; i < sizes.size(); ++i) {
      Calls& k = calls[g].emplace_back();
      k.kinds = groups[g];
      double mean_kind = 0;
      for (const auto& ms : idle) mean_kind += ms[i] / static_cast<double>(idle.size());
      const double fits = std::clamp(std::floor(0.6 * sizing / mean_kind), 1.0, 20.0);
      k.n = static_cast<int>(-dist.AllReduceMax(-fits));  // the fewest any rank can take
      for (int j = 0; j < k.n; ++j) k.idle_ms += idle[j % idle.size()][i] / k.n;
      for (Collective c : k.kinds) k.buffers.push_back(BuffersFor(dist, c, sizes[i]));
    }
  }
  std::vector<double> alone;
  for (int r = 0; r < effort.interference_rounds; ++r) {
    alone.push_back(ComputeBeside(model, x, y, dist, nullptr).first);
    for (auto& group : calls)
      for (Calls& k : group) {
        const auto [with_ms, calls_ms] = ComputeBeside(model, x, y, dist, [&k, &dist] {
          for (int j = 0; j < k.n; ++j) {
            CallBuffers& b = k.buffers[j % k.kinds.size()];
            Issue(dist, k.kinds[j % k.kinds.size()], b.in, b.out)->wait();
          }
        });
        k.with.push_back(with_ms);
        k.comm_ms.push_back(calls_ms);
      }
  }
  std::vector<Profile::CommTerms> out;
  for (const auto& group : calls) {
    // (MiB, extra ms per call) of the computation, and of the collectives themselves
    std::vector<std::pair<double, double>> compute_cost, comm_cost;
    for (const Calls& k : group) {
      const double mib = k.buffers[0].bytes / (1024.0 * 1024.0);
      compute_cost.emplace_back(mib, std::max(0.0, TrimmedMean(k.with, kTrim) - TrimmedMean(alone, kTrim)) / k.n);
      comm_cost.emplace_back(mib, std::max(0.0, TrimmedMean(k.comm_ms, kTrim) / k.n - k.idle_ms));
    }
    Profile::CommTerms& t = out.emplace_back();
    std::tie(t.compute_ms_per_call, t.compute_ms_per_mb) = PerCallAndPerMiB(compute_cost);
    std::tie(t.loaded_ms_per_call, t.loaded_ms_per_mb) = PerCallAndPerMiB(comm_cost);
  }
  return out;
}

// The all-reduce over `dist`'s group, measured and fitted; measured again
// (more repeats) while the times do not grow with the size (a machine busy
// with something else), at most 3 times. Every rank decides alike: the
// points are the same on every rank.
std::pair<LinkMeasurement, Link> MeasureAllReduceLink(DistContext& dist, const std::vector<int64_t>& sizes,
                                                      int repeats, double min_seconds) {
  for (int attempt = 1;; ++attempt, repeats *= 2) {
    LinkMeasurement m = MeasureCollective(dist, Collective::kAllReduce, sizes, repeats, min_seconds);
    try {
      Link link = FitLink(m.points, Collective::kAllReduce, dist.world, "measured");
      return {std::move(m), std::move(link)};
    } catch (const std::invalid_argument& e) {
      if (attempt == 3) throw;
      LogWarn("all-reduce over {} ranks not fitted ({}); measuring again with {} repeats", dist.world, e.what(),
              repeats * 2);
    }
  }
}

}  // namespace

Link MeasureAllReduce(DistContext& dist, const std::vector<int64_t>& sizes, const LinkEffort& effort) {
  auto [m, link] = MeasureAllReduceLink(dist, sizes, effort.repeats, effort.min_seconds);
  link.lanes = dist.comm_lanes;
  AddToTable(&link, Collective::kAllReduce, dist.world, m.points);
  return link;
}

namespace {

// What a profile says of the run it was measured for (model, precision,
// optimizer, device), before anything is measured.
Profile ProfileOfRun(const RunConfig& config, torch::Device device) {
  Profile p;
  p.model = config.model, p.width = config.width, p.image_size = RunImageSize(config);
  p.batch_size = config.batch_size;
  p.precision = config.amp == "off" ? "float32" : "amp-" + config.amp;
  p.element_bytes = 4, p.optimizer = config.optimizer, p.momentum = config.optimizer == "sgd" ? config.momentum : 0;
  p.device = device.is_cuda() ? "cuda" : "cpu";
  return p;
}

}  // namespace

Profile MeasureMemoryProfile(const RunConfig& config, const ResNetOptions& options, torch::Device device) {
  const ResNet model = BuildModel(options, config.seed, device);
  Profile p = ProfileOfRun(config, device);
  for (const std::string& name : model->unit_names()) {
    p.units.emplace_back();
    p.units.back().name = name;
  }
  const AutocastGuard autocast(config.amp, device);
  MeasureUnitBytes(model, config, device, &p);
  MeasureUnitBackwardBytes(model, config, device, &p);
  return p;
}

Profile MeasureProfile(const RunConfig& config, const ResNetOptions& options, torch::Device device,
                       DistContext& dist, const std::vector<int64_t>& batches, const std::vector<int64_t>& link_sizes,
                       const LinkEffort& effort, bool sharded_collectives, bool point_to_point) {
  const ResNet model = BuildModel(options, config.seed, device);
  Profile p = ProfileOfRun(config, device);
  const RunEnvironment env = DescribeEnvironment(device.is_cuda());
  p.machine = device.is_cuda()
                  ? fmt::format("{}, {}, {}", env.host, CudaDeviceName(device.index()), env.cpu_model)
                  : fmt::format("{}, {}", env.host, env.cpu_model);
  p.command = config.command, p.torch_version = env.torch_version, p.git_sha = kGitSha, p.created = env.timestamp;
  const bool processes = dist.world > 1;
  const int concurrent = processes || device.is_cuda() ? 1 : std::max(1, config.gpus);
  p.concurrent = std::max(concurrent, dist.world);
  const std::vector<UnitTimes> times = MeasureUnits(config, model, batches, concurrent);
  for (size_t u = 0; u < model->unit_names().size(); ++u) {
    UnitProfile unit;
    unit.name = model->unit_names()[u];
    for (size_t b = 0; b < batches.size(); ++b)
      unit.cost[batches[b]] = {times[b].forward_ms[u], std::max(0.0, times[b].total_ms[u] - times[b].forward_ms[u])};
    p.units.push_back(unit);
  }
  p.optimizer_ms_per_mb = MeasureOptimizer(model, config, device);
  // From here on in the run's precision: its activations, its step, and the
  // computation beside the collectives (MeasureUnits sets its own).
  const AutocastGuard autocast(config.amp, device);
  MeasureUnitBytes(model, config, device, &p);
  MeasureUnitBackwardBytes(model, config, device, &p);
  p.buffer_broadcast_bytes = BufferBroadcastBytes(model);
  double units_ms = 0;
  for (double ms : times[0].total_ms) units_ms += ms;
  p.step_overhead_ms = MeasureStepOverhead(model, config, device, units_ms,
                                           p.optimizer_ms_per_mb * static_cast<double>(p.Parameters()) *
                                               static_cast<double>(p.element_bytes) / (1024.0 * 1024.0));
  if (processes && !link_sizes.empty()) {
    auto [m, fitted] = MeasureAllReduceLink(dist, link_sizes, effort.repeats, effort.min_seconds);
    std::vector<LinkMeasurement> sharded;  // what zero1/2/3 run instead of an all-reduce
    if (sharded_collectives)
      for (Collective c : {Collective::kReduceScatter, Collective::kAllGather})
        sharded.push_back(MeasureCollective(dist, c, link_sizes, effort.repeats, effort.min_seconds));
    // Gloo's send and receive take host memory only (a CUDA tensor's pointer
    // aborted rank 0 on an H200), and pmp's stages across ranks run on CPU
    // devices alone (--stage-ranks): on a GPU the projection prices a hand-off
    // by the all-reduce's fit, as for a preset link.
    if (point_to_point && device.is_cuda()) {
      if (dist.is_root())
        LogInfo("point-to-point not measured: --stage-ranks runs on CPU devices only; the all-reduce's fit "
                "stands for it");
    } else if (point_to_point) {
      // pmp's hand-offs: from 1 KiB (a small model's activation between stages is a few KiB, which a
      // shaped link's token bucket lets out at once: the fit of larger sizes would price it at the
      // rate) up to 4 MiB, at most 5 rounds (a 100 Mbit/s link is slow).
      std::vector<int64_t> sizes{1 << 10, 4 << 10};
      for (int64_t b : link_sizes)
        if (b <= (int64_t{4} << 20)) sizes.push_back(b);
      sharded.push_back(MeasurePointToPoint(dist, sizes, std::min(effort.repeats, 5)));
    }
    if (!device.is_cuda()) {  // GPUs copy on their own engines
      std::vector<std::vector<Collective>> groups{{Collective::kAllReduce}};
      if (sharded_collectives) groups.push_back({Collective::kAllGather, Collective::kReduceScatter});
      std::vector<LinkMeasurement> tables = sharded;
      tables.push_back(m);
      const std::vector<Profile::CommTerms> terms = MeasureInterference(model, config, dist, effort, groups, tables);
      p.comm_compute_ms_per_call = terms[0].compute_ms_per_call, p.comm_compute_ms_per_mb = terms[0].compute_ms_per_mb;
      p.comm_loaded_ms_per_call = terms[0].loaded_ms_per_call, p.comm_loaded_ms_per_mb = terms[0].loaded_ms_per_mb;
      if (sharded_collectives) p.sharded_comm = terms[1];
    }
    if (!dist.is_root()) return p;  // rank 0 fits, writes and predicts
    p.link = std::move(fitted);
    p.link->lanes = dist.comm_lanes;
    p.link_ranks = dist.world;
    p.link_points.push_back(m);
    AddToTable(&*p.link, Collective::kAllReduce, dist.world, m.points);
    for (const LinkMeasurement& s : sharded) {
      p.link_points.push_back(s);
      const Collective c = *CollectiveFromName(s.collective);
      AddToTable(&*p.link, c, dist.world, s.points);
      try {
        const Link fit = FitLink(s.points, c, dist.world, "measured");
        p.link->own[c] = {fit.alpha_s, fit.bandwidth};
        LogInfo("{} over {} ranks: alpha {:.1f} us, {:.3f} GB/s", s.collective, dist.world, fit.alpha_s * 1e6,
                fit.bandwidth / 1e9);
      } catch (const std::invalid_argument& e) {  // noisy timings: the all-reduce's fit stands for it
        LogWarn("{} over {} ranks not fitted ({}); the all-reduce's fit stands for it", s.collective, dist.world,
                e.what());
      }
    }
    LogInfo("link over {} ranks: alpha {:.1f} us, {:.3f} GB/s ({}); beside the computation an all-reduce costs "
            "it {:.3f} ms + {:.3f} ms/MiB and takes {:.3f} ms + {:.3f} ms/MiB longer", dist.world,
            p.link->alpha_s * 1e6, p.link->bandwidth / 1e9, p.link->source, p.comm_compute_ms_per_call,
            p.comm_compute_ms_per_mb, p.comm_loaded_ms_per_call, p.comm_loaded_ms_per_mb);
    if (p.sharded_comm)
      LogInfo("beside the computation an all-gather or reduce-scatter costs it {:.3f} ms + {:.3f} ms/MiB and takes "
              "{:.3f} ms + {:.3f} ms/MiB longer", p.sharded_comm->compute_ms_per_call,
              p.sharded_comm->compute_ms_per_mb, p.sharded_comm->loaded_ms_per_call, p.sharded_comm->loaded_ms_per_mb);
  }
  return p;
}

int RunCalibration(const RunConfig& config, const ResNetOptions& options, torch::Device device, DistContext& dist) {
  const std::vector<int64_t> batches = CalibrationBatches(config.batch_size);
  const Profile p = MeasureProfile(config, options, device, dist, batches,
                                   {16 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20},
                                   CalibrationEffort(), /*sharded_collectives=*/true, /*point_to_point=*/true);
  dist.Shutdown();
  if (dist.is_root()) {
    WriteProfile(p, config.calibrate);
    LogInfo("profile written to {}: {} units at batches {}, optimizer {:.3f} ms/MiB", config.calibrate, p.units.size(),
            fmt::join(batches, ","), p.optimizer_ms_per_mb);
  }
  return 0;
}

}  // namespace ddpbench
