// The flight records between ranks (flight_watch.h), through the store.
#include "harness/flight_watch.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "base/log.h"
#include "harness/dist.h"
#include "harness/flight_recorder.h"

namespace ddpbench {
namespace {

// Progress every tenth of a second, slower in a large world (the store is
// one server for every rank): 100 ms up to 8 ranks, then 12.5 ms a rank, at
// most 2 s. A line 10 beats old: the rank is stuck where it cannot publish, or gone.
std::atomic<int64_t> g_beat_ms{100};
std::chrono::milliseconds Beat() { return std::chrono::milliseconds(g_beat_ms.load()); }
double SilentS() { return static_cast<double>(g_beat_ms.load()) / 100.0; }
constexpr double kRecordWaitS = 3.0;   // how long a failing rank waits for the others' records
constexpr int64_t kStragglerSteps = 200;
const char* const kFlightNamedKey = "flight/named";  // the rank that printed the cause

// A rank asked for its record that is still running this long after: stuck.
constexpr auto kStuckExit = std::chrono::milliseconds(static_cast<int64_t>((kRecordWaitS + 1.5) * 1000));

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// A rank still running after the others named the cause: say where it was, end.
[[noreturn]] void ExitStuck(const std::string& why) {
  const flight::Progress p = flight::ParseProgress(flight::ProgressLine());
  fmt::print(stderr, "ddpbench: error: rank {}: stopped {:.0f} s after the run failed elsewhere ({}); this rank was "
             "{}\n", flight::Snapshot().rank, kRecordWaitS + 1.5, why, p.Describe());
  std::fflush(stderr);
  std::_Exit(kExitRankLost);
}

bool Has(c10d::Store& store, const std::string& key) { return store.check({key}); }

flight::Progress ProgressOf(c10d::Store& store, int rank) {
  try {
    if (Has(store, FlightProgressKey(rank))) return flight::ParseProgress(Text(store.get(FlightProgressKey(rank))));
  } catch (const std::exception&) {
  }
  return {};
}

double AgeS(const flight::Progress& p) { return static_cast<double>(flight::NowNs() - p.at_ns) / 1e9; }

// The collective this rank failed or waited in: the oldest of the entries
// after its last completed one (a coalesced broadcast enters several at once).
const flight::Entry* Stuck(const flight::Record& r) {
  const flight::Entry* stuck = nullptr;
  for (auto it = r.entries.rbegin(); it != r.entries.rend() && it->state != flight::State::kCompleted; ++it)
    stuck = &*it;
  return stuck;
}

// Waits (at most kRecordWaitS) until every other rank has written its record
// or is silent.
void WaitForRecords(c10d::Store& store, int world, int me) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kRecordWaitS);
  while (std::chrono::steady_clock::now() < deadline) {
    bool pending = false;
    for (int r = 0; r < world && !pending; ++r) {
      if (r == me || Has(store, FlightWrittenKey(r))) continue;
      const flight::Progress p = ProgressOf(store, r);
      pending = p.ok && AgeS(p) < SilentS();
    }
    if (!pending) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// "rank 1 was last at step 10 (between phases), ..., alive 0.1 s ago"
std::string DescribeRank(int rank, const flight::Progress& p) {
  if (!p.ok) return fmt::format("rank {} published no progress (dead or unreachable)", rank);
  const double age = AgeS(p);
  return fmt::format("rank {} was last {}, {}", rank, p.Describe(),
                     age < SilentS() ? fmt::format("alive {:.1f} s ago", age)
                                    : fmt::format("silent for {:.1f} s (dead or unreachable)", age));
}

// Alive and inside a collective: a rank that waits, not one that holds up.
bool Waiting(const flight::Progress& p) {
  return p.ok && AgeS(p) < SilentS() && (p.state == "entered" || p.state == "failed");
}

// What this rank waited in: "collective #57 of world (DDP buffer broadcast: broadcast)".
std::string WhatOf(const flight::Record& mine, const flight::Entry& e) {
  const std::string label = e.label.empty() ? "" : e.label + ": ";
  if (e.peer < 0)
    return fmt::format("collective #{} of {} ({}{})", e.seq, mine.groups.at(e.group).name, label, e.op);
  return fmt::format("{} #{} {} rank {} (tag {}; {}{})", e.op == "send" ? "send" : "receive", e.seq,
                     e.op == "send" ? "to" : "from", e.peer, e.tag, label, e.op);
}

// The ranks of the stuck collective's group that never entered it (send or
// receive: the peer), each with its last progress.
std::map<int, flight::Progress> Missing(c10d::Store& store, const flight::Record& mine, const flight::Entry& stuck,
                                        int world) {
  std::map<int, flight::Progress> out;
  const flight::GroupInfo& group = mine.groups.at(stuck.group);
  for (int r : group.ranks) {
    if (r == mine.rank || r >= world || (stuck.peer >= 0 && r != stuck.peer)) continue;
    const flight::Progress p = ProgressOf(store, r);
    const auto it = p.entered.find(group.name);
    if (p.ok && stuck.peer < 0 && it != p.entered.end() && it->second >= stuck.seq) continue;  // it entered
    out[r] = p;
  }
  return out;
}

// The rank a transport's error says it waited for ("... waiting for rank 1",
// "rank 1 (pid 123) has exited"), or -1.
int RankNamedIn(const std::string& error) {
  for (const char* marker : {"waiting for rank ", "for rank "}) {
    const auto at = error.find(marker);
    if (at == std::string::npos) continue;
    const char* digits = error.c_str() + at + std::strlen(marker);
    if (std::isdigit(static_cast<unsigned char>(*digits))) return std::atoi(digits);
  }
  const auto pid = error.find(" (pid ");  // "rank 1 (pid 123) has exited"
  const auto rank = pid == std::string::npos ? std::string::npos : error.rfind("rank ", pid);
  if (rank != std::string::npos && std::isdigit(static_cast<unsigned char>(error[rank + 5])))
    return std::atoi(error.c_str() + rank + 5);
  return -1;
}

// Every rank entered the stuck collective: the ones that stopped inside it
// (silent: stopped, or dead), and the one the transport named as the peer it
// waited for: what each was last doing, and their ranks (none: {}).
std::pair<std::string, std::vector<int>> StoppedInside(c10d::Store& store, const flight::Record& mine,
                                                       const flight::Entry& stuck, const std::string& error,
                                                       int world) {
  std::vector<int> ranks;
  std::vector<std::string> details;
  const int named = RankNamedIn(error);
  for (int r : mine.groups.at(stuck.group).ranks) {
    if (r == mine.rank || r >= world) continue;
    const flight::Progress p = ProgressOf(store, r);
    if (r != named && p.ok && AgeS(p) < SilentS()) continue;  // alive and not the awaited peer
    ranks.push_back(r);
    details.push_back(DescribeRank(r, p));
  }
  return {fmt::format("{}", fmt::join(details, "; ")), ranks};
}

// The line naming who held the run up, and their ranks. When those this rank
// waited for are waiting themselves, the ranks holding up the chain are the
// ones not inside any collective (or silent).
std::pair<std::string, std::vector<int>> NameCulprit(c10d::Store& store, const flight::Record& mine,
                                                     const std::string& error, int world) {
  const flight::Entry* stuck = Stuck(mine);
  if (!stuck) return {};
  const std::string what = WhatOf(mine, *stuck);
  const std::string records = std::filesystem::path(flight::RecordPath()).parent_path().string() + "/";
  const auto missing = Missing(store, mine, *stuck, world);
  if (missing.empty())
    if (auto inside = StoppedInside(store, mine, *stuck, error, world); !inside.second.empty())
      return {fmt::format("rank{} {} stopped inside {} that rank {} waited in: {}; the transport said: {}; records "
                          "in {}", inside.second.size() > 1 ? "s" : "", fmt::join(inside.second, ", "), what,
                          mine.rank, inside.first, error, records), inside.second};
  if (missing.empty())
    return {fmt::format("every rank of {} entered {}; it failed on rank {} ({}): the link or transport between "
                        "them, not a missing rank; records in {}", mine.groups.at(stuck->group).name, what,
                        mine.rank, error, records), {}};
  std::vector<int> direct, holders;
  bool all_waiting = true;
  for (const auto& [r, p] : missing) {
    direct.push_back(r);
    all_waiting = all_waiting && Waiting(p);
  }
  std::vector<std::string> details;
  if (all_waiting)
    for (int r = 0; r < world; ++r) {
      const flight::Progress p = r == mine.rank ? flight::Progress{} : ProgressOf(store, r);
      if (r == mine.rank || Waiting(p)) continue;
      holders.push_back(r);
      details.push_back(DescribeRank(r, p));
    }
  if (!holders.empty())
    return {fmt::format("rank{} {} never entered {} next collective: {}; rank {} waited in {} for rank{} {}, "
                        "{} waiting in turn; records in {}", holders.size() > 1 ? "s" : "", fmt::join(holders, ", "),
                        holders.size() > 1 ? "their" : "its", fmt::join(details, "; "), mine.rank, what,
                        direct.size() > 1 ? "s" : "", fmt::join(direct, ", "), direct.size() > 1 ? "themselves" : "itself",
                        records), holders};
  for (const auto& [r, p] : missing) details.push_back(DescribeRank(r, p));
  return {fmt::format("rank{} {} {} {} that rank {} waited in: {}; records in {}", direct.size() > 1 ? "s" : "",
                      fmt::join(direct, ", "), stuck->peer >= 0 ? "did not answer" : "never entered", what,
                      mine.rank, fmt::join(details, "; "), records), direct};
}

}  // namespace

const char* const kFlightDumpKey = "flight/dump";
std::string FlightProgressKey(int rank) { return fmt::format("flight/progress/{}", rank); }
std::string FlightWrittenKey(int rank) { return fmt::format("flight/written/{}", rank); }

struct FlightWatch::State {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  std::atomic<bool> stop{false};
  // The publisher sleeps a whole beat on this, woken early only to stop: a
  // rank's one core is not interrupted more often than it publishes.
  std::mutex mutex;
  std::condition_variable wake;

  void Sleep(std::chrono::milliseconds beat) {
    std::unique_lock<std::mutex> lock(mutex);
    wake.wait_for(lock, beat, [this] { return stop.load(); });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop.store(true);
    }
    wake.notify_all();
  }
};

FlightWatch::FlightWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int world)
    : state_(std::make_shared<State>()) {
  g_beat_ms.store(std::min<int64_t>(2000, std::max<int64_t>(100, int64_t{25} * world / 2)));
  state_->store = std::move(store);
  state_->rank = rank;
  if (!flight::Enabled() || !state_->store) return;
  // Detached: a store that no longer answers may block it for --timeout,
  // and the run must not wait for that at exit.
  std::thread([s = state_] {
    std::string asked;  // why another rank (or the launcher) asked for records
    auto asked_at = std::chrono::steady_clock::now();
    while (!s->stop.load()) {
      try {
        s->store->set(FlightProgressKey(s->rank), Bytes(flight::ProgressLine()));
        if (asked.empty() && Has(*s->store, kFlightDumpKey)) {
          asked = Text(s->store->get(kFlightDumpKey));
          asked_at = std::chrono::steady_clock::now();
          const std::string path = flight::WriteRecord("asked for by " + asked);
          if (!path.empty()) {
            LogWarn("flight record -> {}", path);
            s->store->set(FlightWrittenKey(s->rank), Bytes(path));
          }
        }
      } catch (const std::exception&) {
        if (asked.empty()) return;  // the store is gone before anyone asked: nothing to publish to
      }
      // The run has failed elsewhere: a rank still here after the others
      // have named the cause is stuck (no launcher may be left to stop it).
      if (!asked.empty() && std::chrono::steady_clock::now() - asked_at > kStuckExit) ExitStuck(asked);
      s->Sleep(Beat());
    }
  }).detach();
}

FlightWatch::~FlightWatch() { state_->Stop(); }

std::string ReportCollectiveFailure(DistContext& dist, const std::string& error) {
  if (!flight::Enabled() || dist.world == 1 || !dist.group) return "";
  const std::string path = flight::WriteRecord(error);
  if (!path.empty()) LogWarn("flight record -> {}", path);
  // The exchange runs on its own thread with a deadline: a store on a host
  // that can no longer be reached blocks each call for the store's timeout.
  auto named_line = std::make_shared<std::promise<std::string>>();
  std::future<std::string> named_future = named_line->get_future();
  std::thread([named_line, store = dist.group->getStore(), rank = dist.rank, world = dist.world, error, path] {
    std::string line;
    try {
      store->set(kFlightDumpKey, Bytes(fmt::format("rank {}: {}", rank, error)));
      if (!path.empty()) store->set(FlightWrittenKey(rank), Bytes(path));
      WaitForRecords(*store, world, rank);
      auto named = NameCulprit(*store, flight::Snapshot(), error, world);
      // One line for the run: the first rank to name the cause prints it.
      const std::vector<uint8_t> me = Bytes(std::to_string(rank));
      if (!named.first.empty() && store->compareSet(kFlightNamedKey, {}, me) == me) line = std::move(named.first);
    } catch (const std::exception&) {
    }
    named_line->set_value(std::move(line));
  }).detach();
  if (named_future.wait_for(std::chrono::duration<double>(kRecordWaitS + 2)) == std::future_status::ready)
    return named_future.get();
  const flight::Record mine = flight::Snapshot();
  const flight::Entry* stuck = Stuck(mine);
  return fmt::format("rank {} could not reach the rendezvous store within {:.0f} s (its host down or "
                     "unreachable?){}", dist.rank, kRecordWaitS + 2,
                     stuck ? fmt::format("; it waited in collective #{} of {} ({})", stuck->seq,
                                         mine.groups.at(stuck->group).name, stuck->label)
                           : "");
}

StragglerFigures GatherStragglers(DistContext& dist, double step_ms) {
  if (!flight::Enabled() || dist.world == 1 || !dist.group) return {};
  flight::Record mine = flight::TimedRecord();
  int64_t last = 0;
  for (const auto& e : mine.entries) last = std::max(last, e.step);
  auto old = [&](int64_t step) { return step <= last - kStragglerSteps; };
  mine.entries.erase(std::remove_if(mine.entries.begin(), mine.entries.end(), [&](auto& e) { return old(e.step); }),
                     mine.entries.end());
  mine.spans.erase(std::remove_if(mine.spans.begin(), mine.spans.end(), [&](auto& s) { return old(s.step); }),
                   mine.spans.end());
  const std::vector<std::string> texts =
      dist.GatherTextToRoot("flight/timed", flight::ToJson(mine, "timed steps"), "straggler records gather");
  if (!dist.is_root()) return {};
  std::vector<flight::Record> all;
  for (const std::string& text : texts) all.push_back(flight::FromJson(text));
  return AttributeStragglers(all, dist.world, step_ms);
}

void AskForRecords(c10::intrusive_ptr<c10d::Store> raw, const std::string& why, const std::vector<int>& alive,
                   double wait_s) {
  try {
    c10d::PrefixStore store("ddpbench/", std::move(raw));
    store.set(kFlightDumpKey, Bytes(why));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    for (int r : alive)
      while (!Has(store, FlightWrittenKey(r)) && std::chrono::steady_clock::now() < deadline) {
        const flight::Progress p = ProgressOf(store, r);
        if (!p.ok || AgeS(p) >= SilentS()) break;  // stuck where it cannot write, or gone
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
  } catch (const std::exception&) {
  }
}

std::string LastProgressOf(c10::intrusive_ptr<c10d::Store> raw, int rank) {
  try {
    c10d::PrefixStore store("ddpbench/", std::move(raw));
    const flight::Progress p = ProgressOf(store, rank);
    return p.ok ? fmt::format("{} ({:.1f} s before)", p.Describe(), AgeS(p)) : "";
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace ddpbench
