// The resharding arithmetic (planning/reshard.h) on made-up tensors: every
// layout family (replicated, whole on one rank, ZeRO by size and by group,
// HSDP meshes down to shard groups of one rank,
// pipeline stages, even row blocks) at several worlds, written by one and
// read back by every other; each rank gets exactly the elements it holds
// and reads nothing more.
#include "planning/reshard.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddpbench {
namespace {

// Made-up logical tensors, a zero-sized one among them.
const std::map<std::string, int64_t> kNumels = {{"a", 7}, {"b", 0}, {"c", 13}, {"d", 1}, {"e", 40}, {"f", 5}};

double Value(const std::string& name, int64_t i) { return static_cast<double>(name[0]) * 1000 + static_cast<double>(i); }

std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const auto& [name, numel] : kNumels) names.push_back(name);
  return names;
}
std::vector<int64_t> Numels() {
  std::vector<int64_t> n;
  for (const auto& [name, numel] : kNumels) n.push_back(numel);
  return n;
}

// A layout: every rank's pieces.
struct Layout {
  std::string what;
  std::vector<std::vector<ShardPiece>> ranks;
};

Layout Replicated(int world) {
  Layout l{"replicated x" + std::to_string(world), {}};
  for (int r = 0; r < world; ++r) l.ranks.push_back(WholePieces(kNumels, r));
  return l;
}

// zero1/2/3's slices; with `replicas`, the shard group repeated that many
// times (hsdp: global rank g holds slice g % group size; a group of one rank
// holds every slice).
Layout Zero(const ZeroPartition& p, const std::string& what, int replicas = 1) {
  Layout l{what, {}};
  for (int g = 0; g < p.world * replicas; ++g) {
    l.ranks.push_back(ZeroPieces(p, Names(), g % p.world, [](int64_t b) { return "bucket" + std::to_string(b); }));
    for (auto& piece : l.ranks.back()) piece.holder = g;
  }
  return l;
}

// The made-up tensors as a pipeline's units: {a, b}, {c}, {d, e}, {f}.
std::vector<std::map<std::string, int64_t>> Units() {
  return {{{"a", 7}, {"b", 0}}, {{"c", 13}}, {{"d", 1}, {"e", 40}}, {{"f", 5}}};
}

// Stage of each of `units` units cut into `stages` contiguous ranges (the first ones longer).
std::vector<int> ContiguousStages(int units, int stages) {
  std::vector<int> stage_of;
  for (int s = 0; s < stages; ++s)
    for (int n = 0; n < units / stages + (s < units % stages ? 1 : 0); ++n) stage_of.push_back(s);
  return stage_of;
}

// A pipeline's layers on `stages` stage ranks, `replicas` times (pmp --stage-ranks).
Layout Stages(int stages, int replicas = 1) {
  Layout l{fmt::format("stages {}x{}", replicas, stages), std::vector<std::vector<ShardPiece>>(stages * replicas)};
  for (const auto& p : StagePieces(Units(), ContiguousStages(4, stages), stages, replicas, "stage.")) l.ranks[p.holder].push_back(p);
  return l;
}

// Every tensor cut into `world` contiguous blocks (the last ones shorter).
Layout Rows(int world) {
  Layout l{"rows x" + std::to_string(world), std::vector<std::vector<ShardPiece>>(world)};
  for (const auto& [name, numel] : kNumels) {
    const int64_t block = (numel + world - 1) / world;
    for (int r = 0; r < world; ++r) {
      const int64_t lo = std::min(numel, r * block), hi = std::min(numel, lo + block);
      if (lo < hi) l.ranks[r].push_back({name, lo, hi - lo, r, "rows." + name, 0});
    }
  }
  return l;
}

std::vector<Layout> AllLayouts() {
  std::vector<Layout> all;
  for (int world : {1, 2, 3, 4}) {
    all.push_back(Replicated(world));
    all.push_back(Stages(world));
    all.push_back(Stages(world, 2));
    all.push_back(Rows(world));
    all.push_back(Zero(PartitionForZero(Numels(), 4, 64, 16, world), "zero by size x" + std::to_string(world)));
    all.push_back(Zero(PartitionForZero(Numels(), 4, 1 << 20, 1 << 20, world, 4),
                       "zero one aligned bucket x" + std::to_string(world)));
    all.push_back(Zero(PartitionForZeroByGroup(Numels(), {0, 0, 1, 1, 2, 3}, world),
                       "zero by group x" + std::to_string(world)));
    all.push_back(Zero(PartitionForZeroByGroup(Numels(), {0, 0, 1, 1, 2, 3}, world),
                       "hsdp replicate=2,shard=" + std::to_string(world), 2));
  }
  all.push_back({"whole on rank 2 of 3", {{}, {}, WholePieces(kNumels, 2)}});
  return all;
}

// Stored tensors by (rank, key), filled from a layout's pieces.
using Store = std::map<std::pair<int, std::string>, std::vector<double>>;

void Put(Store& store, const ShardPiece& p, bool fill) {
  auto& buffer = store[{p.holder, p.stored}];
  if (static_cast<int64_t>(buffer.size()) < p.stored_offset + p.length) buffer.resize(p.stored_offset + p.length, -1);
  if (fill)
    for (int64_t i = 0; i < p.length; ++i) buffer[p.stored_offset + i] = Value(p.logical, p.begin + i);
}

TEST(Reshard, EveryLayoutToEveryOther) {
  const auto layouts = AllLayouts();
  for (const auto& from : layouts) {
    Store written;
    std::vector<ShardPiece> have;
    for (const auto& pieces : from.ranks)
      for (const auto& p : pieces) {
        Put(written, p, true);
        have.push_back(p);
      }
    for (const auto& to : layouts) {
      for (int r = 0; r < static_cast<int>(to.ranks.size()); ++r) {
        SCOPED_TRACE(from.what + " -> " + to.what + ", rank " + std::to_string(r));
        Store read;
        int64_t wanted = 0;
        for (const auto& p : to.ranks[r]) {
          Put(read, p, false);
          wanted += p.length;
        }
        int64_t copied = 0;
        for (const auto& c : PlanReshard(have, to.ranks[r], r)) {
          const auto& src = written.at({c.holder, c.from});
          auto& dst = read.at({r, c.to});
          ASSERT_LE(c.from_offset + c.length, static_cast<int64_t>(src.size()));
          ASSERT_LE(c.to_offset + c.length, static_cast<int64_t>(dst.size()));
          for (int64_t i = 0; i < c.length; ++i) dst[c.to_offset + i] = src[c.from_offset + i];
          copied += c.length;
        }
        EXPECT_EQ(copied, wanted);  // this rank's slices, nothing more
        for (const auto& p : to.ranks[r])
          for (int64_t i = 0; i < p.length; ++i)
            ASSERT_EQ(read.at({r, p.stored})[p.stored_offset + i], Value(p.logical, p.begin + i)) << p.logical << "[" << i << "]";
      }
    }
  }
}

TEST(Reshard, PrefersTheReadersOwnCopy) {
  const Layout from = Replicated(3);
  std::vector<ShardPiece> have;
  for (const auto& pieces : from.ranks) have.insert(have.end(), pieces.begin(), pieces.end());
  for (int r = 0; r < 3; ++r) EXPECT_EQ(HoldersRead(PlanReshard(have, WholePieces(kNumels, r), r)), std::vector<int>{r});
  // A rank the old world lacked reads the lowest rank's copy.
  EXPECT_EQ(HoldersRead(PlanReshard(have, WholePieces(kNumels, 5), 5)), std::vector<int>{0});
}

// A new split reads each layer from the stage rank that held it: 4 stages to
// 2 reads ranks {0, 1} and {2, 3}; 2 to 4 reads one old rank each; 2 replicated
// pipelines to one pipeline of 4 read the reader's own rank where it held the layer.
TEST(Reshard, StageRanksReadTheRanksHoldingTheirLayers) {
  auto have = [](int stages, int replicas) {
    return StagePieces(Units(), ContiguousStages(4, stages), stages, replicas, "old.");
  };
  auto want = [](int stages, int rank) {
    std::vector<ShardPiece> mine;
    for (const auto& p : StagePieces(Units(), ContiguousStages(4, stages), stages, 1, "new."))
      if (p.holder == rank) mine.push_back(p);
    return mine;
  };
  EXPECT_EQ(HoldersRead(PlanReshard(have(4, 1), want(2, 0), 0)), (std::vector<int>{0, 1}));
  EXPECT_EQ(HoldersRead(PlanReshard(have(4, 1), want(2, 1), 1)), (std::vector<int>{2, 3}));
  const std::vector<std::vector<int>> from_two = {{0}, {0}, {1}, {1}};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(HoldersRead(PlanReshard(have(2, 1), want(4, r), r)), from_two[r]) << r;
  const std::vector<std::vector<int>> from_two_by_two = {{0}, {0}, {1}, {3}};  // rank 3 held units 2-3 in replica 1
  for (int r = 0; r < 4; ++r) EXPECT_EQ(HoldersRead(PlanReshard(have(2, 2), want(4, r), r)), from_two_by_two[r]) << r;
  EXPECT_THROW(StagePieces(Units(), {0, 1, 2, 4}, 4, 1, ""), std::invalid_argument);  // no stage 4
  EXPECT_THROW(StagePieces(Units(), {0, 1}, 2, 1, ""), std::invalid_argument);        // units unplaced
}

TEST(Reshard, NamesWhatNoPieceHolds) {
  std::vector<ShardPiece> have = {{"w", 0, 4, 0, "w", 0}, {"w", 6, 4, 1, "w", 0}};
  try {
    PlanReshard(have, {{"w", 0, 10, 0, "w", 0}}, 0);
    FAIL() << "a gap was not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("element 4 of w"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PlanReshard(have, {{"v", 0, 1, 0, "v", 0}}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ddpbench
