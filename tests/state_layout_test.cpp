// The logical state behind SaveState() maps (harness/state_layout.h): a
// ZeRO-like layout on 2 ranks (sliced parameters, their Adam fields, a
// scalar step per slice, a padding-only slice) described, then read back
// whole on 3 ranks (ddp-like) and sliced otherwise on 3 ranks, every value
// where it belongs and the layout's own keys kept.
#include "harness/state_layout.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace ddpbench {
namespace {

const std::vector<std::string> kParams = {"w", "b"};
const std::vector<std::vector<int64_t>> kShapes = {{3, 2}, {3}};

// The logical value of every tensor: distinct per name and element.
torch::Tensor Logical(const std::string&, const std::vector<int64_t>& shape, double base) {
  return torch::arange(base, base + static_cast<double>(c10::multiply_integers(shape)), torch::kFloat).reshape(shape);
}
torch::Tensor Value(const std::string& name) {
  if (name == "model.w") return Logical(name, {3, 2}, 100);
  if (name == "model.b") return Logical(name, {3}, 200);
  if (name == "optim.w.exp_avg") return Logical(name, {3, 2}, 300);
  if (name == "optim.b.exp_avg") return Logical(name, {3}, 400);
  if (name == "model.bn.running_mean") return Logical(name, {4}, 500);
  if (name == "scaler.scale") return torch::tensor(7.0);
  throw std::logic_error(name);
}

// A ZeRO layout of w and b over `world` ranks: its description and every rank's stored map.
StateLayout ZeroLayout(const ZeroPartition& p) {
  StateLayout l;
  for (size_t i = 0; i < kParams.size(); ++i) l.shapes[kParams[i]] = kShapes[i];
  for (size_t b = 0; b < p.buckets.size(); ++b) l.optim_name["shard.bucket" + std::to_string(b)] = "bucket" + std::to_string(b);
  for (int r = 0; r < p.world; ++r)
    for (auto piece : ZeroPieces(p, kParams, r, [](int64_t b) { return "shard.bucket" + std::to_string(b); }))
      l.params.push_back(piece);
  return l;
}

TensorMap ZeroStored(const ZeroPartition& p, int rank) {
  TensorMap m;
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    const auto& bucket = p.buckets[b];
    torch::Tensor param = torch::zeros({bucket.shard_numel}), avg = torch::zeros({bucket.shard_numel});
    for (size_t i : bucket.params) {
      const auto& s = p.slots[i];
      for (int64_t e = 0; e < s.numel; ++e) {
        const int64_t at = s.offset + e - bucket.SliceBegin(rank);
        if (at < 0 || at >= bucket.shard_numel) continue;
        param[at] = Value("model." + kParams[i]).reshape(-1)[e];
        avg[at] = Value("optim." + kParams[i] + ".exp_avg").reshape(-1)[e];
      }
    }
    m["shard.bucket" + std::to_string(b)] = param;
    m["optim.bucket" + std::to_string(b) + ".exp_avg"] = avg;
    m["optim.bucket" + std::to_string(b) + ".step"] = torch::tensor(int64_t{5});
  }
  m["model.bn.running_mean"] = Value("model.bn.running_mean");
  m["scaler.scale"] = Value("scaler.scale");
  m["meta.world"] = torch::tensor(int64_t{p.world});
  return m;
}

struct Written {
  StateDescription d;
  std::map<int, TensorMap> files;
};
Written WriteZero(int world) {
  const ZeroPartition p = PartitionForZero({6, 3}, 4, 1 << 20, 1 << 20, world, 2);
  Written w;
  for (int r = 0; r < world; ++r) w.files[r] = ZeroStored(p, r);
  w.d = DescribeState(ZeroLayout(p), w.files[0], world);
  return w;
}

TensorMap Read(const Written& w, const StateLayout& layout, const TensorMap& fresh, int rank) {
  std::vector<ShardPiece> want;
  TensorMap out = AllocateTarget(layout, fresh, w.d.logical, rank, &want);
  ApplyCopies(PlanReshard(AllPieces(w.d), want, rank), w.files, &out);
  return out;
}

TEST(StateLayout, ZeroStateReadWholeOnEveryRank) {
  const Written w = WriteZero(2);
  EXPECT_EQ(w.d.logical.at("optim.w.step").shape, std::vector<int64_t>{});
  const TensorMap fresh = {{"model.w", torch::zeros({3, 2})}, {"model.b", torch::zeros({3})},
                           {"model.bn.running_mean", torch::zeros({4})}, {"scaler.scale", torch::tensor(1.0)},
                           {"ddp.bucket_sizes", torch::tensor({9})}};
  for (int rank = 0; rank < 3; ++rank) {
    const TensorMap got = Read(w, StateLayout{}, fresh, rank);
    for (const char* name : {"model.w", "model.b", "optim.w.exp_avg", "optim.b.exp_avg", "model.bn.running_mean",
                             "scaler.scale"})
      EXPECT_TRUE(got.at(name).equal(Value(name))) << name << " on rank " << rank;
    EXPECT_EQ(got.at("optim.b.step").item<int64_t>(), 5);
    EXPECT_TRUE(got.at("ddp.bucket_sizes").equal(fresh.at("ddp.bucket_sizes")));  // the new layout's own
    EXPECT_FALSE(got.count("meta.world"));  // the old layout's is not carried over
  }
}

TEST(StateLayout, ZeroStateReadIntoAnotherWorld) {
  const Written w = WriteZero(2);
  const ZeroPartition p3 = PartitionForZero({6, 3}, 4, 1 << 20, 1 << 20, 3, 2);  // rank 2's slice: b's end and padding
  for (int rank = 0; rank < 3; ++rank) {
    TensorMap fresh = ZeroStored(p3, rank);
    for (auto& [key, value] : fresh)
      if (key.rfind("optim.", 0) == 0) value = torch::Tensor();
    for (auto it = fresh.begin(); it != fresh.end();) it = it->second.defined() ? std::next(it) : fresh.erase(it);
    const TensorMap expected = ZeroStored(p3, rank);
    const TensorMap got = Read(w, ZeroLayout(p3), fresh, rank);
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [key, value] : expected)
      EXPECT_TRUE(got.at(key).equal(value)) << key << " on rank " << rank << ": " << got.at(key) << " vs " << value;
  }
}

// A pipeline over stage ranks: units u0 {w, bn.mean (a buffer)} and u1 {b},
// contiguous on `stages` ranks; rank r's map holds its units' tensors, their
// Adam fields and the loss scale.
StateLayout StageLayout(int stages) {
  StateLayout l;
  std::vector<std::map<std::string, int64_t>> units = {{{"u0.w", 6}, {"u0.bn.mean", 4}}, {{"u1.b", 3}}};
  l.shapes = {{"u0.w", {3, 2}}, {"u0.bn.mean", {4}}, {"u1.b", {3}}};
  l.dtypes = {{"u0.w", torch::kFloat}, {"u0.bn.mean", torch::kFloat}, {"u1.b", torch::kFloat}};
  l.optim_name = {{"model.u0.w", "u0.w"}, {"model.u1.b", "u1.b"}};
  l.params = StagePieces(units, stages == 1 ? std::vector<int>{0, 0} : std::vector<int>{0, 1}, stages, 1, "model.");
  return l;
}
TensorMap StageStored(int stages, int rank) {
  TensorMap m = {{"scaler.scale", Value("scaler.scale")}, {"meta.place", torch::tensor({int64_t{rank}})}};
  if (rank == 0) {
    m["model.u0.w"] = Value("model.w");
    m["model.u0.bn.mean"] = Value("model.bn.running_mean");
    m["optim.u0.w.exp_avg"] = Value("optim.w.exp_avg");
    m["optim.u0.w.step"] = torch::tensor(int64_t{5});
  }
  if (rank == stages - 1) {
    m["model.u1.b"] = Value("model.b");
    m["optim.u1.b.exp_avg"] = Value("optim.b.exp_avg");
    m["optim.u1.b.step"] = torch::tensor(int64_t{5});
  }
  return m;
}

// Written by 2 stage ranks, read by 1 (both units) and back by 2: each rank
// gets its units' tensors and fields, reading only the files holding them.
TEST(StateLayout, StageRanksReadIntoAnotherSplit) {
  for (const auto [from, to] : {std::pair{2, 1}, std::pair{1, 2}}) {
    Written w;
    for (int r = 0; r < from; ++r) w.files[r] = StageStored(from, r);
    w.d = DescribeState(StageLayout(from), w.files[0], from);  // rank 0 describes rank 1's unit too
    EXPECT_EQ(w.d.whole, std::vector<std::string>{"scaler.scale"});
    EXPECT_EQ(w.d.logical.at("model.u1.b").dtype, torch::kFloat);
    EXPECT_FALSE(w.d.logical.count("optim.u0.bn.mean.exp_avg"));  // a buffer has no optimizer fields
    for (int rank = 0; rank < to; ++rank) {
      SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to) + " stages, rank " + std::to_string(rank));
      TensorMap fresh = StageStored(to, rank);
      for (auto it = fresh.begin(); it != fresh.end();) it = it->first.rfind("optim.", 0) == 0 ? fresh.erase(it) : std::next(it);
      const TensorMap got = Read(w, StageLayout(to), fresh, rank);
      const TensorMap expected = StageStored(to, rank);
      ASSERT_EQ(got.size(), expected.size());
      for (const auto& [key, value] : expected) EXPECT_TRUE(got.at(key).equal(value)) << key;
    }
  }
}

}  // namespace
}  // namespace ddpbench
