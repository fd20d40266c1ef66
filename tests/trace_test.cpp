// The --trace recorder on its own (harness/trace.h): nothing is kept while it
// is off, NvtxRange scopes become nested complete events with their depth and
// arguments on the calling thread's named track, and collectives in flight at
// once go to separate comm lanes so that every track nests.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "harness/phase.h"
#include "harness/trace.h"

namespace ddpbench {
namespace {

// Times since a second before now (system clock), so they stay exact in a double.
nlohmann::json Events(int rank = 3) {
  const int64_t origin = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count() - 1000000000;
  return nlohmann::json::parse("[" + trace::SerializeRank(rank, origin) + "]");
}

std::vector<nlohmann::json> Complete(const nlohmann::json& events) {
  std::vector<nlohmann::json> out;
  for (const auto& e : events)
    if (e["ph"] == "X") out.push_back(e);
  return out;
}

TEST(Trace, RecordsNestedRangesWithArgumentsOnNamedTracks) {
  { NvtxRange before("step"); }  // off: not recorded
  trace::Start();
  {
    NvtxRange step("step");
    trace::Annotate("step", 7);
    NvtxRange forward("forward");
    trace::Annotate("op", "F");
  }
  std::thread worker([] {
    trace::NameThread("stage 1", 2);
    NvtxRange backward("backward");
  });
  worker.join();
  const auto start = trace::Clock::now();
  trace::Collective("all-reduce", 0, start, start + std::chrono::milliseconds(5));
  trace::Collective("all-reduce", 1, start + std::chrono::milliseconds(1), start + std::chrono::milliseconds(3));
  trace::Collective("all-gather", 2, start + std::chrono::milliseconds(6), start + std::chrono::milliseconds(7));
  trace::g_enabled.store(false);
  { NvtxRange after("step"); }  // off again: not recorded

  const nlohmann::json events = Events();
  std::map<int, std::string> names;
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  EXPECT_EQ(names, (std::map<int, std::string>{{0, "main"}, {1, "stage 1"}, {1000, "comm"}, {1001, "comm 2"}}));
  const auto spans = Complete(events);
  ASSERT_EQ(spans.size(), 6u);
  EXPECT_EQ(spans[0]["name"], "step");
  EXPECT_EQ(spans[0]["args"], (nlohmann::json{{"step", 7}, {"depth", 0}}));
  EXPECT_EQ(spans[1]["name"], "forward");
  EXPECT_EQ(spans[1]["args"], (nlohmann::json{{"op", "F"}, {"depth", 1}}));
  EXPECT_LE(spans[0]["ts"].get<double>(), spans[1]["ts"].get<double>());
  EXPECT_GE(spans[0]["ts"].get<double>() + spans[0]["dur"].get<double>(),
            spans[1]["ts"].get<double>() + spans[1]["dur"].get<double>());
  EXPECT_EQ(spans[2]["name"], "backward");
  EXPECT_EQ(spans[2]["tid"], 1);
  // Bucket 1 overlaps bucket 0: its own lane; bucket 2 starts after both.
  EXPECT_EQ(spans[3]["tid"], 1000);
  EXPECT_EQ(spans[3]["args"]["bucket"], 0);
  EXPECT_EQ(spans[4]["tid"], 1000);
  EXPECT_EQ(spans[4]["args"]["bucket"], 2);
  EXPECT_EQ(spans[5]["tid"], 1001);
  EXPECT_EQ(spans[5]["args"]["bucket"], 1);
  EXPECT_DOUBLE_EQ(spans[3]["dur"].get<double>(), 5000.0);
  for (const auto& e : events) EXPECT_EQ(e["pid"], 3);

  trace::Start();  // a new recording starts empty
  trace::g_enabled.store(false);
  EXPECT_TRUE(Complete(Events()).empty());
}

}  // namespace
}  // namespace ddpbench
