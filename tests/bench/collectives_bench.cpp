// Google Benchmark: the collectives ddpbench's strategies use (all-reduce,
// reduce-scatter, all-gather, broadcast) over the same c10d process groups
// (DistContext::Connect: Gloo or shared memory, --cpu-backend=shm, on CPU;
// NCCL on CUDA with >= 2 GPUs), 1 KiB to 64 MiB, so a DDP or ZeRO row can be
// explained by the link it ran on, and shared memory compared with Gloo.
// Ranks are threads of this process, joined through a TCPStore served here, as
// the spawn launcher serves it. Bandwidths as nccl-tests defines them: size S
// is the whole buffer (all-reduce and broadcast buffer, all-gather output,
// reduce-scatter input), algbw = S / time, busbw = algbw x 2(n-1)/n for
// all-reduce, (n-1)/n for all-gather and reduce-scatter, 1 for broadcast.
// Each case runs the call the strategies make: on Gloo, reduce-scatter is
// zero1's alltoall + local sum (Gloo has none; shared memory's is its own)
// and all-gather is allgather_into_tensor_coalesced. BM_ShmArena_allreduce
// is shared memory's all-reduce of buffers placed in the ranks' arenas
// (harness/shm_arena.h), as ddp places its gradient buckets: summed where
// they lie (nccl-tests' registered-buffer mode is the same idea on a GPU).
// DDPBENCH_BENCH_RANKS sets the CPU world (default 2).
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "harness/cuda_support.h"
#include "harness/dist.h"
#include "harness/shm_arena.h"
#include "harness/shm_backend.h"
#include "tests/thread_ranks.h"

namespace ddpbench {
namespace {

enum class Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

double BusFactor(Op op, int n) {
  switch (op) {
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kReduceScatter:
    case Op::kAllGather: return static_cast<double>(n - 1) / n;
    case Op::kBroadcast: return 1.0;
  }
  return 1.0;
}

// One rank's buffers for one (op, size): `full` holds S bytes, `part` S/n,
// `scratch` S (Gloo reduce-scatter).
struct Buffers {
  torch::Tensor full, part, scratch;
};

void RunOnce(DistContext& rank, Op op, Buffers& b) {
  auto& pg = *rank.group;
  switch (op) {
    case Op::kAllReduce: {
      std::vector<at::Tensor> t{b.full};
      pg.allreduce(t)->wait();
      break;
    }
    case Op::kReduceScatter:
      if (rank.backend == "gloo") {
        // Gloo has no reduce-scatter; zero1's: alltoall of the slices, local sum.
        std::vector<int64_t> equal;
        pg.alltoall_base(b.scratch, b.full, equal, equal)->wait();
        torch::sum_out(b.part, b.scratch.view({rank.world, -1}), std::vector<int64_t>{0});
      } else {
        pg._reduce_scatter_base(b.part, b.full)->wait();
      }
      break;
    case Op::kAllGather: {  // as zero1 gathers its parameter slices
      std::vector<at::Tensor> out{b.full}, in{b.part};
      pg.allgather_into_tensor_coalesced(out, in)->wait();
      break;
    }
    case Op::kBroadcast: {
      std::vector<at::Tensor> t{b.full};
      pg.broadcast(t)->wait();
      break;
    }
  }
}

// n ranks on threads; rank 0's work is run by the benchmark thread, the
// others wait for a job (op, buffers, repetitions) and run it in lockstep.
class Cluster {
 public:
  // `cpu_backend`: --cpu-backend (gloo or shm) of CPU ranks; `arena_bytes`
  // > 0: each rank also attaches a shared-memory arena of that size.
  Cluster(int world, bool cuda, const std::string& cpu_backend, int64_t arena_bytes = 0)
      : ranks_(world), arenas_(world) {
    store_ = testing::ServeStoreOnFreePort();
    std::vector<std::thread> joining;
    for (int r = 0; r < world; ++r) {
      auto& d = ranks_[r];
      testing::AsSpawnedRank(d, r, world, store_->getPort(), cpu_backend);
      if (cuda) d.device = torch::Device(torch::kCUDA, r);
      joining.emplace_back([this, &d, r, cuda, arena_bytes] {
        d.Connect(120.0, cuda, /*nccl=*/cuda);
        if (arena_bytes > 0) arenas_[r] = AttachShmArenas(d.shm_world, arena_bytes);
      });
    }
    for (auto& t : joining) t.join();
    for (int r = 1; r < world; ++r) workers_.emplace_back([this, r] { Serve(r); });
  }
  ~Cluster() {
    Post(nullptr, 0);
    for (auto& t : workers_) t.join();
  }
  int world() const { return static_cast<int>(ranks_.size()); }
  const DistContext& rank(int r) const { return ranks_[r]; }
  ShmArena* arena(int r) const { return arenas_[r].get(); }

  // Runs `op` `reps` times on every rank; returns when rank 0 is done (the
  // collectives themselves keep the ranks in step).
  void Run(Op op, std::vector<Buffers>& buffers, int reps) {
    Post([this, op, &buffers](int r) { RunOnce(ranks_[r], op, buffers[r]); }, reps);
    for (int i = 0; i < reps; ++i) RunOnce(ranks_[0], op, buffers[0]);
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return done_ == world() - 1; });
  }

 private:
  void Post(std::function<void(int)> job, int reps) {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    reps_ = reps;
    done_ = 0;
    ++generation_;
    job_cv_.notify_all();
  }
  void Serve(int r) {
    int64_t seen = 0;
    while (true) {
      std::function<void(int)> job;
      int reps;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        job_cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (!job_) return;
        job = job_;
        reps = reps_;
      }
      for (int i = 0; i < reps; ++i) job(r);
      std::lock_guard<std::mutex> lock(mutex_);
      ++done_;
      done_cv_.notify_all();
    }
  }

  std::vector<DistContext> ranks_;
  std::vector<std::shared_ptr<ShmArena>> arenas_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable job_cv_, done_cv_;
  std::function<void(int)> job_;
  int reps_ = 0, done_ = 0;
  int64_t generation_ = 0;
};

// One cluster at a time (the other's threads and segments let go), so a
// backend's figures are not taken beside another's idle transport.
Cluster& GetCluster(bool cuda, const std::string& cpu_backend) {
  static std::string key;
  static std::unique_ptr<Cluster> c;
  const std::string wanted = cuda ? "nccl" : cpu_backend;
  if (key != wanted) c.reset();
  key = wanted;
  if (!c) {
    const char* env = std::getenv("DDPBENCH_BENCH_RANKS");
    int world = cuda ? CudaDeviceCount() : (env ? std::atoi(env) : 2);
    const bool arena = cpu_backend == "shm-arena";  // room for the largest buffer
    c = std::make_unique<Cluster>(world < 2 ? 2 : world, cuda, arena ? "shm" : cpu_backend,
                                  arena ? (64 << 20) + (1 << 20) : 0);
  }
  return *c;
}

void BM_Collective(benchmark::State& state, Op op, bool cuda, const std::string& cpu_backend) {
  at::set_num_threads(1);
  Cluster& cluster = GetCluster(cuda, cpu_backend);
  const int n = cluster.world();
  const int64_t bytes = state.range(0);
  const int64_t part = bytes / 4 / n;  // float32 elements per rank's part
  std::vector<Buffers> buffers(n);
  for (int r = 0; r < n; ++r) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(cluster.rank(r).device);
    buffers[r] = {torch::ones({part * n}, opts), torch::ones({part}, opts), torch::empty({part * n}, opts)};
    if (ShmArena* arena = cluster.arena(r)) {
      buffers[r].full = arena->Empty(part * n, torch::kFloat32);
      if (!buffers[r].full.defined()) {
        state.SkipWithError("no room in the shared-memory arena");
        return;
      }
      buffers[r].full.fill_(1);
    }
  }
  const int64_t real_bytes = part * n * 4;  // S rounded down to a multiple of 4n
  cluster.Run(op, buffers, 1);              // warm-up: Gloo pairs, NCCL communicators
  const int batch = 4;
  while (state.KeepRunningBatch(batch)) {
    cluster.Run(op, buffers, batch);
    if (cuda) CudaSynchronize(0);
  }
  const double moved = static_cast<double>(real_bytes) * static_cast<double>(state.iterations());
  state.counters["algbw"] = benchmark::Counter(moved, benchmark::Counter::kIsRate);
  state.counters["busbw"] = benchmark::Counter(moved * BusFactor(op, n), benchmark::Counter::kIsRate);
  state.counters["ranks"] = n;
  state.SetLabel(cuda ? "nccl" : cluster.arena(0) ? "shm, buffers in arenas" : cluster.rank(0).backend);
}

void Register(const std::string& name, Op op, bool cuda, const std::string& cpu_backend = "gloo") {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [op, cuda, cpu_backend](benchmark::State& state) {
    BM_Collective(state, op, cuda, cpu_backend);
  });
  b->RangeMultiplier(4)->Range(1 << 10, 64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

const bool kRegistered = [] {
  const std::pair<const char*, Op> ops[] = {{"allreduce", Op::kAllReduce},
                                            {"reduce_scatter", Op::kReduceScatter},
                                            {"allgather", Op::kAllGather},
                                            {"broadcast", Op::kBroadcast}};
  for (auto [name, op] : ops) {
    Register(std::string("BM_Gloo_") + name, op, false);
    Register(std::string("BM_Shm_") + name, op, false, "shm");
    if (op == Op::kAllReduce) Register(std::string("BM_ShmArena_") + name, op, false, "shm-arena");
    if (CudaAvailable() && CudaDeviceCount() >= 2) Register(std::string("BM_Nccl_") + name, op, true);
  }
  return true;
}();

}  // namespace
}  // namespace ddpbench
