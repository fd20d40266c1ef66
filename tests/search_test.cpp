// ddpbench --search (projection/search.h): the space's parsing, the
// candidates it enumerates, the model's ranking with its memory pruning and
// its validated-first rule, on hand-made profiles, and the command line's
// bad inputs, each one message and exit 2.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/config.h"
#include "projection/search.h"
#include "profile_fixtures.h"
#include "test_util.h"

namespace ddpbench {
namespace {
using namespace ddpbench::testing;

SearchSpace Defaults() {
  SearchSpace s;
  s.strategies = {"ddp"}, s.batches = {8}, s.bucket_caps_mb = {25}, s.schedules = {"1f1b"}, s.chunks = {0};
  s.recompute = {"none"}, s.replicas = {1};
  return s;
}

const Candidate& Find(const std::vector<Candidate>& all, const std::string& entry) {
  const auto it = std::find_if(all.begin(), all.end(), [&](const Candidate& c) { return c.entry == entry; });
  if (it == all.end()) throw std::runtime_error("no candidate " + entry);
  return *it;
}

TEST(Search, SpaceKeysReplaceTheDefaults) {
  const SearchSpace s = ParseSearchSpace("strategies=zero2,pmp;batch=16,32,16;recompute=none,all", Defaults());
  EXPECT_EQ(s.strategies, (std::vector<std::string>{"zero2", "pmp"}));
  EXPECT_EQ(s.batches, (std::vector<int64_t>{16, 32}));  // repeats dropped
  EXPECT_EQ(s.recompute, (std::vector<std::string>{"none", "all"}));
  EXPECT_EQ(s.bucket_caps_mb, (std::vector<double>{25}));  // not given: the default
  EXPECT_EQ(ParseSearchSpace("", Defaults()).strategies, (std::vector<std::string>{"ddp"}));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"colour=red", "'colour' is not a key; accepted: strategies, batch"},
      {"strategies=ddp,fsdp", "strategies=ddp,fsdp: 'fsdp' is not accepted; accepted: single"},
      {"batch=0", "batch=0: '0' is not accepted; a batch per device is a whole number >= 1"},
      {"batch=", "batch=: '' is not accepted"},
      {"bucket=-1", "bucket=-1: '-1' is not accepted"},
      {"schedule=2f2b", "'2f2b' is not accepted; accepted: gpipe, 1f1b"},
      {"recompute=some", "recompute=some: 'some' is not accepted; accepted: none, all"},
      {"batch", "'batch' is not key=values"},
  };
  for (const auto& [spec, says] : bad) {
    const std::string msg = ConfigErrorOf([&] { ParseSearchSpace(spec, Defaults()); });
    EXPECT_NE(msg.find(says), std::string::npos) << spec << " -> " << msg;
  }
}

TEST(Search, EnumeratesTheKnobsEachStrategyReads) {
  // ddp reads the bucket: 2 batches x 2 buckets x 2 recompute = 8. pmp reads the schedule and the
  // micro-batches: 2 x 2 x 2 x 2 = 16, less the 4 with recompute on a split backward (refused as
  // a run refuses them) = 12. mp reads neither: 2 x 2 = 4.
  SearchSpace s = ParseSearchSpace(
      "strategies=ddp,pmp,mp;batch=8,16;bucket=5,25;schedule=1f1b,zero-bubble;chunks=2,4;recompute=none,all",
      Defaults());
  const std::vector<Candidate> all = EnumerateCandidates(s, OneNode(2, TestLink(1e-5, 1e9)));
  EXPECT_EQ(all.size(), 24u);
  const Candidate& pmp = Find(all, "pmp:b8:1f1b:m2");
  // A pipeline runs the global batch: 8 a device, 16 through its two stages.
  EXPECT_EQ(pmp.flags, (std::vector<std::string>{"--strategy=pmp", "--gpus=2", "--batch-size=16", "--schedule=1f1b",
                                                 "--chunks=2"}));
  EXPECT_EQ(pmp.global_batch, 16);
  EXPECT_EQ(Find(all, "ddp:b16:cap5:recompute").flags,
            (std::vector<std::string>{"--strategy=ddp", "--gpus=2", "--batch-size=16", "--bucket-cap-mb=5",
                                      "--recompute=all"}));
  EXPECT_THROW(Find(all, "pmp:b8:zero-bubble:m2:recompute"), std::runtime_error);
  s.strategies.clear();
  EXPECT_NE(ConfigErrorOf([&] { EnumerateCandidates(s, OneNode(2, TestLink(1e-5, 1e9))); })
                .find("the search space is empty"),
            std::string::npos);
}

TEST(Search, RecomputeAddsEachUnitsForwardToTheStep) {
  // One device, 4 units of 1 ms forward: recompute runs each forward again, 4 ms more a step.
  const Profile p = UniformProfile(4, 1024, 8);
  SearchSpace s = Defaults();
  s.strategies = {"single"}, s.recompute = {"none", "all"};
  const std::vector<Candidate> ranked = RankCandidates(p, EnumerateCandidates(s, OneNode(1, TestLink(0, 1e12))), 0);
  ASSERT_EQ(ranked.size(), 2u);
  EXPECT_EQ(ranked[0].entry, "single:b8");  // the faster first
  EXPECT_NEAR(ranked[1].predicted.step_ms - ranked[0].predicted.step_ms, 4.0, 1e-9);
  EXPECT_LT(ranked[1].predicted.memory_mb, ranked[0].predicted.memory_mb);
}

TEST(Search, RanksFittingThenValidatedThenFastest) {
  const Profile p = UniformProfile(4, 1 << 20, 8);
  SearchSpace s = Defaults();
  s.strategies = {"dp", "ddp", "zero3", "pmp"}, s.batches = {4, 8};
  const Topology t = OneNode(2, TestLink(1e-5, 1e9));
  const std::vector<Candidate> free = RankCandidates(p, EnumerateCandidates(s, t), 0);
  ASSERT_EQ(free.size(), 8u);
  bool unvalidated_seen = false;
  for (size_t i = 0; i < free.size(); ++i) {
    EXPECT_EQ(free[i].rank, static_cast<int>(i) + 1);
    const bool validated = free[i].error_pct >= 0;
    EXPECT_EQ(validated, free[i].strategy != "dp") << free[i].entry;
    if (!validated) unvalidated_seen = true;
    EXPECT_FALSE(validated && unvalidated_seen) << free[i].entry << ": a validated one after a not validated";
    if (i > 0 && (free[i - 1].error_pct >= 0) == validated)
      EXPECT_GE(free[i - 1].predicted.ImagesPerSecond(), free[i].predicted.ImagesPerSecond());
  }
  // A limit between zero3's memory and ddp's: ddp is set aside (rank 0, last, its need named),
  // zero3 fits and leads.
  const double ddp_mb = Find(free, "ddp:b8:cap25").predicted.memory_mb;
  const double zero3_mb = Find(free, "zero3:b8").predicted.memory_mb;
  ASSERT_LT(zero3_mb, ddp_mb);
  const std::vector<Candidate> tight = RankCandidates(p, EnumerateCandidates(s, t), (zero3_mb + ddp_mb) / 2);
  const Candidate& ddp = Find(tight, "ddp:b8:cap25");
  EXPECT_EQ(ddp.rank, 0);
  EXPECT_FALSE(ddp.fits);
  EXPECT_EQ(ddp.note.rfind("needs ", 0), 0u) << ddp.note;
  EXPECT_TRUE(tight.front().fits);
  EXPECT_FALSE(tight.back().fits);
  EXPECT_LE(tight.front().predicted.memory_mb, (zero3_mb + ddp_mb) / 2);
  // Nothing fits: the closest is named with what it needs.
  const std::string none = ConfigErrorOf([&] { RankCandidates(p, EnumerateCandidates(s, t), 0.001); });
  EXPECT_NE(none.find("nothing in the search space fits 0.0 MB per device: the closest, "), std::string::npos)
      << none;
}

TEST(Search, CommandLineTableAndBadInputs) {
  TempDir dir;
  Profile p = UniformProfile(10, 1 << 20, 32);
  p.link = TestLink(2e-4, 1e9);
  p.link_ranks = 2;
  WriteProfile(p, dir.File("p.json"));
  const std::string prof = "--search=" + dir.File("p.json");
  const auto ok = RunDdpbench(Args({prof, "--gpus=2", "--search-space=strategies=ddp,zero2;batch=16,32",
                                    "--search-csv=" + dir.File("s.csv")}));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const std::string table = ReadFile(dir.File("s.csv"));
  EXPECT_EQ(table.rfind("rank,entry,strategy,flags,batch_per_device,global_batch,predicted_img_s,", 0), 0u) << table;
  EXPECT_NE(table.find(",ddp:b16:cap25,ddp,--strategy=ddp --gpus=2 --batch-size=16 --bucket-cap-mb=25,16,32,"),
            std::string::npos)
      << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 5) << table;
  // A cluster this machine is not: predicted on its links, hsdp among the strategies (its ranks
  // started by a launcher: no --gpus), 64 devices far past the 2 validated.
  const auto cluster = RunDdpbench(Args({prof, "--nodes=8", "--gpus-per-node=8", "--intra=nvlink4",
                                         "--inter=ib-ndr400", "--search-csv=" + dir.File("c.csv")}));
  ASSERT_EQ(cluster.exit_code, 0) << cluster.output;
  const std::string big = ReadFile(dir.File("c.csv"));
  EXPECT_NE(big.find(",hsdp:b32,hsdp,--strategy=hsdp --batch-size=32,32,2048,"), std::string::npos) << big;
  EXPECT_NE(cluster.output.find("8 node(s) x 8 device(s), extrapolated far past the validated sizes"),
            std::string::npos)
      << cluster.output;
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{prof, "--search-space=strategies="}, "strategies=: '' is not accepted"},
      {{prof, "--gpus=1", "--search-space=strategies=pmp"}, "the model runs none of its 1 configurations"},
      {{prof, "--gpus=2", "--cpu-device-memory-mb=1"}, "nothing in the search space fits 1.0 MB per device"},
      {{prof, "--model=resnet50"}, "the profile is of --model resnet18, the run asks for resnet50"},
      {{prof, "--device=cuda"}, "the profile was measured on cpu devices, the search is for --device=cuda"},
      {{prof, "--nodes=1,2"}, "--nodes=1,2: --search takes one node count"},
      {{"--search-space=batch=8"}, "--search-space=batch=8: applies to --search only"},
      {{prof, "--project=" + dir.File("p.json")}, "give one of them"},
  };
  for (const auto& [args, says] : bad) {
    const auto r = RunDdpbench(Args(args));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace ddpbench
