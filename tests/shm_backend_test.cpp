// The shared-memory collectives (harness/shm_backend.h) against Gloo's, on
// made-up tensors: every dtype, sizes that do not divide by the ranks and
// that stream through a small slot in several chunks, the world and
// sub-groups; the sum is the same bits on every rank, in rank order; a rank
// that never comes is named when the timeout passes; point-to-point messages
// through the mailboxes, matched by tag; tensors placed in the ranks' arenas
// all-reduced in place; averages. Ranks are threads of
// this process, joined through a TCPStore served here.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <dirent.h>
#include <sys/mman.h>
#include <stdlib.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness/dist.h"
#include "harness/memory.h"
#include "harness/shm_arena.h"
#include "harness/shm_backend.h"
#include "tests/thread_ranks.h"

namespace ddpbench {
namespace {

// `world` ranks on threads, each a DistContext joined with `backend`; with
// `replicas` > 1 each also joins its mesh (shard group, replicate group).
class ThreadWorld {
 public:
  ThreadWorld(int world, const std::string& backend, int replicas = 1, double timeout_s = 60,
              int64_t slot_bytes = 4096, int64_t p2p_bytes = 0)
      : ranks_(world) {
    store_ = testing::ServeStoreOnFreePort();
    const int port = store_->getPort();
    Run([&](int r, DistContext& d) {
      testing::AsSpawnedRank(d, r, world, port, backend);
      d.shm_slot_bytes = slot_bytes;
      d.shm_p2p_bytes = p2p_bytes;
      d.Connect(timeout_s, false, false);
      if (replicas > 1) d.ConnectMesh(replicas, false);
    });
  }
  // fn(rank, its context) on every rank at once.
  void Run(const std::function<void(int, DistContext&)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) threads.emplace_back([&, r] { fn(r, ranks_[r]); });
    for (auto& t : threads) t.join();
  }
  DistContext& rank(int r) { return ranks_[r]; }

 private:
  std::vector<DistContext> ranks_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

// Rank r's made-up tensor: numel values that differ by rank and position
// (bf16 and fp32 sums then round differently with the order of summation).
torch::Tensor MadeUp(int r, int64_t numel, torch::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + r);
  return torch::randn({numel}, gen, torch::TensorOptions().dtype(torch::kFloat64)).mul(1 + r).to(dtype);
}

double Tolerance(torch::ScalarType dtype) {
  return dtype == torch::kFloat64 ? 1e-12 : dtype == torch::kFloat32 ? 1e-5 : 2e-2;
}

// The group's barrier through its backend. Not ProcessGroup::barrier(): that
// assigns a function-local static tensor shared by every group of the
// process, so ranks on threads that enter it at once corrupt the heap.
void Barrier(c10d::ProcessGroup& pg) { pg.getBackend(c10::DeviceType::CPU)->barrier(c10d::BarrierOptions{})->wait(); }

using Collective = std::function<std::vector<torch::Tensor>(int r, c10d::ProcessGroup& pg)>;

// The collective's outputs per rank, on shared memory and on Gloo.
std::pair<std::vector<std::vector<torch::Tensor>>, std::vector<std::vector<torch::Tensor>>> BothWays(
    int world, const Collective& call) {
  std::vector<std::vector<torch::Tensor>> shm(world), gloo(world);
  {
    ThreadWorld w(world, "shm");
    w.Run([&](int r, DistContext& d) {
      EXPECT_EQ(BackendName(*d.group), "shm");
      shm[r] = call(r, *d.group);
    });
  }
  ThreadWorld w(world, "gloo");
  w.Run([&](int r, DistContext& d) {
    EXPECT_EQ(BackendName(*d.group), "gloo");
    gloo[r] = call(r, *d.group);
  });
  return {shm, gloo};
}

void ExpectSame(const std::vector<std::vector<torch::Tensor>>& shm,
                const std::vector<std::vector<torch::Tensor>>& gloo, const std::string& what) {
  for (size_t r = 0; r < shm.size(); ++r)
    for (size_t i = 0; i < shm[r].size(); ++i) {
      const auto dtype = shm[r][i].scalar_type();
      EXPECT_TRUE(torch::allclose(shm[r][i].to(torch::kFloat64), gloo[r][i].to(torch::kFloat64), Tolerance(dtype),
                                  Tolerance(dtype)))
          << what << " " << dtype << " rank " << r << " output " << i;
    }
}

const torch::ScalarType kDtypes[] = {torch::kFloat32, torch::kFloat64, torch::kBFloat16};

// 3 ranks; 4096-byte slots: 1500 float64 values take 3 chunks; 7 is uneven.
TEST(ShmBackend, AllReduceMatchesGlooAndIsTheRankOrderSumOnEveryRank) {
  for (auto dtype : kDtypes)
    for (int64_t numel : {7, 1500}) {
      auto [shm, gloo] = BothWays(3, [&](int r, c10d::ProcessGroup& pg) {
        std::vector<torch::Tensor> t{MadeUp(r, numel, dtype)};
        pg.allreduce(t)->wait();
        std::vector<torch::Tensor> m{MadeUp(r, numel, dtype)};
        pg.allreduce(m, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
        return std::vector<torch::Tensor>{t[0], m[0]};
      });
      ExpectSame(shm, gloo, "allreduce " + std::to_string(numel));
      // Rank order: ((x0 + x1) + x2), bf16 summed in fp32, rounded once.
      const bool half = dtype == torch::kBFloat16;
      torch::Tensor sum = MadeUp(0, numel, dtype).to(half ? torch::kFloat32 : dtype);
      for (int r = 1; r < 3; ++r) sum.add_(MadeUp(r, numel, dtype).to(sum.scalar_type()));
      for (int r = 0; r < 3; ++r) EXPECT_TRUE(torch::equal(shm[r][0], sum.to(dtype))) << dtype << " rank " << r;
    }
}

// Shares of 4 MiB and more are summed in one pass into the result slot and
// the rank's tensor (SumToBoth): the same rank-order bits, on every rank, in
// two chunks of a 24 MiB slot.
TEST(ShmBackend, LargeSharesSumInOnePassToTheRankOrderSum) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    const int64_t numel = (40 << 20) / c10::elementSize(dtype) + 7;  // 40 MiB: 2 chunks, shares >= 4 MiB
    std::vector<torch::Tensor> out(3);
    ThreadWorld w(3, "shm", 1, 60, 24 << 20);
    w.Run([&](int r, DistContext& d) {
      std::vector<torch::Tensor> t{MadeUp(r, numel, dtype)};
      d.group->allreduce(t)->wait();
      out[r] = t[0];
    });
    torch::Tensor sum = MadeUp(0, numel, dtype);
    for (int r = 1; r < 3; ++r) sum.add_(MadeUp(r, numel, dtype));
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(torch::equal(out[r], sum)) << dtype << " rank " << r;
  }
}

TEST(ShmBackend, ReduceScatterAllGatherAndBroadcastMatchGloo) {
  for (auto dtype : kDtypes)
    for (int64_t part : {5, 700}) {
      auto [shm, gloo] = BothWays(3, [&](int r, c10d::ProcessGroup& pg) {
        torch::Tensor whole = MadeUp(r, 3 * part, dtype), mine = torch::empty({part}, whole.options());
        pg._reduce_scatter_base(mine, whole)->wait();
        // In place: the output is this rank's own row of the input.
        torch::Tensor whole2 = MadeUp(r, 3 * part, dtype), own = whole2.narrow(0, r * part, part);
        pg._reduce_scatter_base(own, whole2)->wait();
        torch::Tensor gathered = torch::empty({3 * part}, whole.options());
        torch::Tensor slice = MadeUp(r + 10, part, dtype);
        pg._allgather_base(gathered, slice)->wait();
        std::vector<torch::Tensor> outs{torch::empty({3 * part}, whole.options())}, ins{slice};
        pg.allgather_into_tensor_coalesced(outs, ins)->wait();
        std::vector<std::vector<torch::Tensor>> rows(1);
        for (int j = 0; j < 3; ++j) rows[0].push_back(torch::empty({part}, whole.options()));
        std::vector<torch::Tensor> in{slice};
        pg.allgather(rows, in)->wait();
        std::vector<torch::Tensor> b{MadeUp(r + 20, 2 * part + 1, dtype)};
        pg.broadcast(b, c10d::BroadcastOptions{1})->wait();
        Barrier(pg);
        return std::vector<torch::Tensor>{mine, own.clone(), gathered, outs[0], torch::cat(rows[0]), b[0]};
      });
      ExpectSame(shm, gloo, "reduce-scatter/all-gather/broadcast " + std::to_string(part));
    }
}

// Two ranks, each output its own row of the input (zero1's slices): summed in
// place, bit for bit what Gloo gives.
TEST(ShmBackend, TwoRanksReduceScatterInPlaceMatchesGloo) {
  for (auto dtype : kDtypes)
    for (int64_t part : {5, 700, 100000}) {
      auto [shm, gloo] = BothWays(2, [&](int r, c10d::ProcessGroup& pg) {
        torch::Tensor whole = MadeUp(r, 2 * part, dtype), own = whole.narrow(0, r * part, part);
        pg._reduce_scatter_base(own, whole)->wait();
        Barrier(pg);
        return std::vector<torch::Tensor>{own.clone(), whole.narrow(0, (1 - r) * part, part).clone()};
      });
      ExpectSame(shm, gloo, "in-place reduce-scatter on 2 ranks " + std::to_string(part));
    }
}

// A mesh of 2 x 2 on one host: each shard group and each replicate group
// reduces over shared memory, only its own ranks.
TEST(ShmBackend, SubGroupsReduceOnlyTheirOwnRanks) {
  std::vector<torch::Tensor> shard(4), replicate(4);
  ThreadWorld w(4, "auto", /*replicas=*/2);
  w.Run([&](int r, DistContext& d) {
    EXPECT_EQ(BackendName(*d.mesh_group), "shm");
    EXPECT_EQ(BackendName(*d.replicate_group), "shm");
    std::vector<torch::Tensor> s{torch::full({600}, static_cast<double>(1 << r), torch::kFloat64)};
    d.mesh_group->allreduce(s)->wait();
    std::vector<torch::Tensor> p{torch::full({600}, static_cast<double>(1 << r), torch::kFloat64)};
    d.replicate_group->allreduce(p)->wait();
    shard[r] = s[0];
    replicate[r] = p[0];
  });
  const double shard_sum[] = {3, 3, 12, 12}, replicate_sum[] = {5, 10, 5, 10};  // groups {0,1},{2,3}; {0,2},{1,3}
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(torch::all(shard[r] == shard_sum[r]).item<bool>()) << r;
    EXPECT_TRUE(torch::all(replicate[r] == replicate_sum[r]).item<bool>()) << r;
  }
}

// Rank `from`'s message `tag` to rank `to`: fp32, fp64 and bf16 of uneven
// sizes; the last one (4800 bytes) too large for a 4096-byte mailbox slot.
torch::Tensor Message(int from, int to, int tag, int tags) {
  const torch::ScalarType dtypes[] = {torch::kFloat32, torch::kFloat64, torch::kBFloat16};
  return tag == tags - 1 ? MadeUp(10 * from + to, 600, torch::kFloat64)
                         : MadeUp(100 * tag + 10 * from + to, 1 + 37 * tag, dtypes[tag % 3]);
}

// Point-to-point: through the mailboxes where the group has them (a message
// larger than a slot, and every message of a group without them, through
// Gloo), each receive matched to its tag whatever the order: every rank sends
// 6 messages to each other one (more than a mailbox's 4 slots, so later sends
// wait for the receiver to take earlier ones) and receives them last tag first.
TEST(ShmBackend, SendsAndReceivesMatchByTagInAnyOrder) {
  constexpr int kWorld = 3, kTags = 6;
  for (int64_t p2p : {int64_t{0}, int64_t{4096}}) {
    ThreadWorld w(kWorld, "shm", 1, 60, 4096, p2p);
    std::vector<std::vector<torch::Tensor>> got(kWorld);
    w.Run([&](int r, DistContext& d) {
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      std::vector<std::vector<torch::Tensor>> out, in;
      for (int q = 0; q < kWorld; ++q)
        for (int tag = 0; q != r && tag < kTags; ++tag) {
          out.push_back({Message(r, q, tag, kTags)});
          works.push_back(d.group->send(out.back(), q, tag));
        }
      for (int q = 0; q < kWorld; ++q)
        for (int tag = kTags - 1; q != r && tag >= 0; --tag) {
          in.push_back({torch::zeros_like(Message(q, r, tag, kTags))});
          works.push_back(d.group->recv(in.back(), q, tag));
        }
      for (auto& work : works) work->wait();
      for (auto& t : in) got[r].push_back(t[0]);
    });
    for (int r = 0; r < kWorld; ++r) {
      size_t i = 0;
      for (int q = 0; q < kWorld; ++q)
        for (int tag = kTags - 1; q != r && tag >= 0; --tag, ++i)
          EXPECT_TRUE(torch::equal(got[r][i], Message(q, r, tag, kTags)))
              << "p2p " << p2p << ": rank " << r << " from " << q << " tag " << tag;
    }
  }
}

// A receive posted for a different size is an error naming both sizes (the
// mailboxes' own message: the message did go through shared memory); one
// whose sender never sends fails when the timeout passes, naming the sender.
TEST(ShmBackend, AMismatchedOrMissingMessageIsNamed) {
  ThreadWorld w(2, "shm", 1, /*timeout_s=*/0.5, 4096, /*p2p_bytes=*/4096);
  std::string mismatch, missing;
  w.Run([&](int r, DistContext& d) {
    auto error = [](const c10::intrusive_ptr<c10d::Work>& work) {
      try {
        work->wait();
      } catch (const c10::Error& e) {
        return std::string(e.what_without_backtrace());
      }
      return std::string();
    };
    std::vector<torch::Tensor> t{r == 0 ? torch::ones({16}) : torch::zeros({8})};
    if (r == 0) {
      d.group->send(t, 1, 99)->wait();
    } else {
      mismatch = error(d.group->recv(t, 0, 99));
      missing = error(d.group->recv(t, 0, 7));
    }
  });
  EXPECT_NE(mismatch.find("shared-memory recv of tag 99 in group world: 32 bytes posted, 64 sent by rank 0"),
            std::string::npos)
      << mismatch;
  EXPECT_NE(missing.find("shared-memory recv of tag 7 in group world: timed out after 500 ms waiting for rank 0"),
            std::string::npos)
      << missing;
}

// Tensors in every rank's arena are summed where they lie: the rank-order
// bits on every rank (float and double, sizes the 3 ranks do not divide);
// where one rank's tensor is not in its arena, or the dtype is bf16, the
// slots' path gives the same; a length that differs is named on every rank.
TEST(ShmBackend, TensorsInArenasAllReduceInPlaceToTheRankOrderSum) {
  ThreadWorld w(3, "shm");
  auto sum_of = [](int64_t numel, torch::ScalarType dtype) {
    const bool half = dtype == torch::kBFloat16;
    torch::Tensor sum = MadeUp(0, numel, dtype).to(half ? torch::kFloat32 : dtype);
    for (int r = 1; r < 3; ++r) sum.add_(MadeUp(r, numel, dtype).to(sum.scalar_type()));
    return sum.to(dtype);
  };
  w.Run([&](int r, DistContext& d) {
    auto arena = AttachShmArenas(d.shm_world, 4 << 20);
    ASSERT_TRUE(arena);
    for (auto dtype : kDtypes)
      for (int64_t numel : {7, 1500, 100003})
        for (bool all_in_arena : {true, false}) {
          torch::Tensor t = all_in_arena || r != 1 ? arena->Empty(numel, dtype) : torch::empty({numel}, dtype);
          ASSERT_TRUE(t.defined());
          t.copy_(MadeUp(r, numel, dtype));
          std::vector<torch::Tensor> ts{t};
          d.group->allreduce(ts)->wait();
          EXPECT_TRUE(torch::equal(t, sum_of(numel, dtype)))
              << dtype << " " << numel << " rank " << r << (all_in_arena ? "" : ", rank 1's not in its arena");
        }
    std::vector<torch::Tensor> uneven{arena->Empty(r == 2 ? 12 : 10, torch::kFloat32).fill_(1)};
    try {
      d.group->allreduce(uneven)->wait();
      ADD_FAILURE() << "rank " << r << ": lengths 10 and 12 all-reduced";
    } catch (const c10::Error& e) {
      const std::string error = e.what_without_backtrace();
      EXPECT_TRUE(error.find("elements, rank") != std::string::npos && error.find("12") != std::string::npos &&
                  error.find("10") != std::string::npos)
          << error;
    }
  });
}

// ReduceOp::AVG (which Gloo refuses): the rank-order sum divided by the
// world inside the sum's pass, on the slots' path and in the arenas, for
// shares summed by ATen and block by block (world 2 multiplies by the exact
// reciprocal, world 3 divides); the same bits as summing, then dividing. An
// integer tensor is refused on every rank, as a division would not be exact.
TEST(ShmBackend, AverageIsTheRankOrderSumDividedByTheWorld) {
  for (int world : {2, 3}) {
    ThreadWorld w(world, "shm");
    auto average_of = [&](int64_t numel, torch::ScalarType dtype) {
      const bool half = dtype == torch::kBFloat16;
      torch::Tensor sum = MadeUp(0, numel, dtype).to(half ? torch::kFloat32 : dtype);
      for (int r = 1; r < world; ++r) sum.add_(MadeUp(r, numel, dtype).to(sum.scalar_type()));
      return sum.div_(world).to(dtype);
    };
    w.Run([&](int r, DistContext& d) {
      auto arena = AttachShmArenas(d.shm_world, 32 << 20);
      ASSERT_TRUE(arena);
      const int64_t large = (world * 4 + 1) << 18;  // fp32 shares over 4 MiB: block by block
      for (auto dtype : kDtypes)
        for (int64_t numel : {int64_t{7}, int64_t{1500}, large})
          for (bool in_arena : {false, true}) {
            if (numel == large && (dtype != torch::kFloat32 || !in_arena)) continue;
            torch::Tensor t = in_arena ? arena->Empty(numel, dtype) : torch::empty({numel}, dtype);
            ASSERT_TRUE(t.defined());
            t.copy_(MadeUp(r, numel, dtype));
            std::vector<torch::Tensor> ts{t};
            d.group->allreduce(ts, c10d::AllreduceOptions{c10d::ReduceOp::AVG})->wait();
            EXPECT_TRUE(torch::equal(t, average_of(numel, dtype)))
                << "world " << world << " " << dtype << " " << numel << " rank " << r << (in_arena ? " in arena" : "");
          }
      std::vector<torch::Tensor> counts{torch::ones({5}, torch::kInt32)};
      EXPECT_THROW(d.group->allreduce(counts, c10d::AllreduceOptions{c10d::ReduceOp::AVG})->wait(), c10::Error)
          << "rank " << r;
    });
  }
}

// A group of one rank (ddp or zero on one device): an all-reduce of any
// reduction and a broadcast leave the tensor as it was, and are still
// collectives (work that completes, in order with the others).
TEST(ShmBackend, AOneRankGroupLeavesItsTensorAsItWas) {
  ThreadWorld w(1, "shm");
  w.Run([&](int, DistContext& d) {
    ASSERT_TRUE(d.shm_world);
    for (auto dtype : kDtypes)
      for (int64_t numel : {int64_t{7}, int64_t{3} << 20}) {
        const torch::Tensor before = MadeUp(0, numel, dtype);
        for (auto op : {c10d::ReduceOp::SUM, c10d::ReduceOp::AVG, c10d::ReduceOp::MAX}) {
          std::vector<torch::Tensor> ts{before.clone()};
          d.group->allreduce(ts, c10d::AllreduceOptions{op})->wait();
          EXPECT_TRUE(torch::equal(ts[0], before)) << dtype << " " << numel << " op " << static_cast<int>(op);
        }
        std::vector<torch::Tensor> ts{before.clone()};
        d.group->broadcast(ts, c10d::BroadcastOptions{})->wait();
        EXPECT_TRUE(torch::equal(ts[0], before)) << dtype << " " << numel << " broadcast";
      }
  });
}

// The arena's allocator: what it cannot place it refuses (the caller then
// uses the heap), freed runs join again, and inside a ShmArenaScope the CPU
// memory tracker places this thread's tensors there (and no other thread's).
TEST(ShmBackend, ArenaPlacesWhatFitsAndGivesItBack) {
  InstallCpuMemoryTracker();
  auto arena = std::make_shared<ShmArena>(nullptr, 0);  // an empty arena places nothing
  EXPECT_FALSE(arena->Empty(1, torch::kFloat32).defined());
  // A private mapping stands in for the segment (the arena unmaps it).
  void* mapped = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  arena = std::make_shared<ShmArena>(static_cast<char*>(mapped), 1 << 16);
  {
    torch::Tensor a = arena->Empty(4096, torch::kFloat32);   // 16 KiB
    torch::Tensor b = arena->Empty(8192, torch::kFloat32);   // 32 KiB
    EXPECT_TRUE(a.defined() && b.defined());
    EXPECT_FALSE(arena->Empty(8192, torch::kFloat32).defined());  // 16 KiB left
    a = torch::Tensor();
    EXPECT_EQ(arena->free_bytes(), size_t{32 << 10});
  }
  EXPECT_EQ(arena->free_bytes(), size_t{1 << 16});
  EXPECT_TRUE(arena->Empty(16384, torch::kFloat32).defined());  // the whole arena again
  torch::Tensor inside, other_thread;
  {
    ShmArenaScope scope(arena.get());
    inside = torch::empty({100}, torch::kFloat32);
    std::thread([&] { other_thread = torch::empty({100}, torch::kFloat32); }).join();
  }
  torch::Tensor outside = torch::empty({100}, torch::kFloat32);
  EXPECT_GE(arena->OffsetOf(inside.data_ptr(), inside.nbytes()), 0);
  EXPECT_LT(arena->OffsetOf(other_thread.data_ptr(), other_thread.nbytes()), 0);
  EXPECT_LT(arena->OffsetOf(outside.data_ptr(), outside.nbytes()), 0);
}

// A rank that never enters the collective is named when the timeout passes;
// the segment was already unlinked when the group was made.
TEST(ShmBackend, ARankThatNeverComesIsNamedAndNothingIsLeftInDevShm) {
  ThreadWorld w(2, "shm", 1, /*timeout_s=*/0.5);
  std::string error;
  w.Run([&](int r, DistContext& d) {
    if (r != 0) return;
    std::vector<torch::Tensor> t{torch::ones({4})};
    try {
      d.group->allreduce(t)->wait();
    } catch (const c10::Error& e) {
      error = e.what_without_backtrace();
    }
  });
  EXPECT_NE(error.find("timed out after 500 ms waiting for rank 1"), std::string::npos) << error;
  DIR* dir = ::opendir("/dev/shm");
  ASSERT_NE(dir, nullptr);
  const std::string ours = "ddpbench-" + std::to_string(::getpid()) + "-";
  while (const dirent* e = ::readdir(dir)) EXPECT_NE(std::string(e->d_name).rfind(ours, 0), 0u) << e->d_name;
  ::closedir(dir);
}

}  // namespace
}  // namespace ddpbench
