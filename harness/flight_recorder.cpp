// The flight recorder's store (flight_recorder.h): one process-wide record
// under one mutex (a collective is entered a few dozen times per step, so the
// lock is never contended enough to show), a ring of the last N entries, and
// the timed steps' entries kept whole for the straggler attribution.
#include "harness/flight_recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/results.h"

namespace ddpbench::flight {
namespace {

constexpr size_t kSpansKept = 64;           // the latest phases, for the dump
constexpr size_t kTimedEntriesMax = 400000;  // bounds the straggler input of a very long run
constexpr size_t kTimedSpansMax = 200000;

struct Channel {  // send/recv order: (group, source, destination, tag)
  int group, src, dst, tag;
  bool operator<(const Channel& o) const {
    return std::tie(group, src, dst, tag) < std::tie(o.group, o.src, o.dst, o.tag);
  }
};

int64_t WallMinusSteadyNs() {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count() -
         duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

struct Recorder {
  std::mutex mutex;
  int rank = 0;
  size_t capacity = 0;
  std::string path;
  // System clock - steady clock: read when the process starts (so that a
  // process that never records, the launcher, still reads ranks' times as
  // wall-clock times) and again by Configure.
  int64_t offset_ns = WallMinusSteadyNs();
  std::vector<GroupInfo> groups;
  std::vector<uint64_t> group_seq;
  std::map<Channel, uint64_t> channel_seq;
  uint64_t next_id = 1;
  std::deque<Entry> ring;
  std::deque<PhaseSpan> spans;
  bool timed = false;
  std::vector<Entry> timed_entries;
  std::vector<PhaseSpan> timed_spans;
};

Recorder& Global() {
  static Recorder r;
  return r;
}
std::atomic<bool> g_on{false};
std::atomic<int64_t> g_step{0};
std::atomic<int> g_phase{static_cast<int>(Phase::kStep)};

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Entry* Find(std::vector<Entry>& entries, uint64_t id) {
  auto it = std::lower_bound(entries.begin(), entries.end(), id,
                             [](const Entry& e, uint64_t v) { return e.id < v; });
  return it != entries.end() && it->id == id ? &*it : nullptr;
}

void Finish(Entry& e, int64_t now, bool ok) {
  if (e.state != State::kEntered) return;
  e.ended_ns = now;
  e.state = ok ? State::kCompleted : State::kFailed;
}

Phase PhaseNamed(const std::string& name) {
  for (int p = 0; p < kNumPhases; ++p)
    if (name == PhaseName(static_cast<Phase>(p))) return static_cast<Phase>(p);
  return Phase::kStep;
}

State StateNamed(const std::string& name) {
  if (name == "completed") return State::kCompleted;
  if (name == "failed") return State::kFailed;
  return State::kEntered;
}

nlohmann::json EntryJson(const Record& record, const Entry& e) {
  nlohmann::json j = {{"id", e.id}, {"group", record.groups.at(e.group).name}, {"seq", e.seq}, {"op", e.op},
                      {"label", e.label}, {"bytes", e.bytes}, {"step", e.step}, {"phase", PhaseName(e.phase)},
                      {"entered_ns", e.entered_ns}, {"state", StateName(e.state)}};
  if (e.ended_ns >= 0) j["ended_ns"] = e.ended_ns;
  if (e.waited_ns >= 0) j["waited_ns"] = e.waited_ns;
  if (e.peer >= 0) {
    j["peer"] = e.peer;
    j["tag"] = e.tag;
  }
  return j;
}

}  // namespace

const char* StateName(State state) {
  switch (state) {
    case State::kEntered: return "entered";
    case State::kCompleted: return "completed";
    case State::kFailed: return "failed";
  }
  return "entered";
}

void Configure(int rank, size_t capacity, const std::string& path) {
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.rank = rank;
  g.path = path;
  g.capacity = capacity;
  g.offset_ns = WallMinusSteadyNs();
  g.groups.clear();
  g.group_seq.clear();
  g.channel_seq.clear();
  g.ring.clear();
  g.spans.clear();
  g.timed_entries.clear();
  g.timed_spans.clear();
  g_on.store(capacity > 0);
}

bool Enabled() { return g_on.load(std::memory_order_relaxed); }

std::string RecordPath() {
  std::lock_guard<std::mutex> lock(Global().mutex);
  return Global().path;
}

std::string RecordPathFor(const std::string& out, int rank) {
  std::string dir = "ddpbench-flight";
  if (!out.empty()) {
    const size_t slash = out.rfind('/');
    const size_t dot = out.rfind('.');
    dir = (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1) ? out.substr(0, dot) : out) +
          ".flight";
  }
  return dir + "/rank-" + std::to_string(rank) + ".json";
}

std::string WriteRecord(const std::string& reason) {
  static std::mutex once;
  static bool written = false;
  std::lock_guard<std::mutex> lock(once);
  const std::string path = RecordPath();
  if (path.empty() || written) return "";
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    ReplaceFile(path, ToJson(Snapshot(), reason));
    written = true;
    return path;
  } catch (const std::exception& e) {
    LogError("flight record: could not write {}: {}", path, e.what());
    return "";
  }
}

int64_t NowNs() { return SteadyNs() + Global().offset_ns; }

int RegisterGroup(const std::string& name, const std::vector<int>& ranks) {
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.groups.push_back({name, ranks});
  g.group_seq.push_back(0);
  return static_cast<int>(g.groups.size()) - 1;
}

uint64_t Enter(int group, const char* op, int peer, int tag, int64_t bytes, const char* label) {
  if (!Enabled()) return 0;
  Recorder& g = Global();
  Entry e;
  e.op = op;
  e.label = label ? label : "";
  e.tag = tag;
  e.bytes = bytes;
  e.step = g_step.load(std::memory_order_relaxed);
  e.phase = static_cast<Phase>(g_phase.load(std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(g.mutex);
  if (group < 0 || group >= static_cast<int>(g.groups.size())) return 0;
  e.group = group;
  const std::vector<int>& ranks = g.groups[group].ranks;
  if (peer >= 0) {
    e.peer = peer < static_cast<int>(ranks.size()) ? ranks[peer] : peer;
    const bool sending = e.op == "send";
    e.seq = ++g.channel_seq[{group, sending ? g.rank : e.peer, sending ? e.peer : g.rank, tag}];
  } else {
    e.seq = ++g.group_seq[group];
  }
  e.id = g.next_id++;
  e.entered_ns = SteadyNs() + g.offset_ns;
  g.ring.push_back(e);
  while (g.ring.size() > g.capacity) g.ring.pop_front();
  if (g.timed && g.timed_entries.size() < kTimedEntriesMax) g.timed_entries.push_back(e);
  return e.id;
}

namespace {
// Applies `update` to entry `id` wherever it is kept (the ring, the timed steps).
template <typename F>
void Update(uint64_t id, F&& update) {
  if (id == 0) return;
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (!g.ring.empty() && id >= g.ring.front().id && id - g.ring.front().id < g.ring.size())
    update(g.ring[id - g.ring.front().id]);
  if (Entry* e = Find(g.timed_entries, id)) update(*e);
}
}  // namespace

void End(uint64_t id, bool ok) {
  const int64_t now = NowNs();
  Update(id, [&](Entry& e) { Finish(e, now, ok); });
}

void Waited(uint64_t id) {
  const int64_t now = NowNs();
  Update(id, [&](Entry& e) {
    if (e.waited_ns < 0) e.waited_ns = now;
  });
}

bool HasFailed() {
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  return std::any_of(g.ring.rbegin(), g.ring.rend(), [](const Entry& e) { return e.state == State::kFailed; });
}

void BeginStep(int64_t step, bool timed) {
  g_step.store(step, std::memory_order_relaxed);
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.timed = timed;
}

int64_t PhaseBegin(Phase phase) {
  if (!Enabled()) return 0;
  g_phase.store(static_cast<int>(phase), std::memory_order_relaxed);
  return NowNs();
}

void PhaseEnd(Phase phase, int64_t start_ns) {
  if (!Enabled() || start_ns == 0) return;
  int expected = static_cast<int>(phase);
  g_phase.compare_exchange_strong(expected, static_cast<int>(Phase::kStep));
  const PhaseSpan span{phase, g_step.load(std::memory_order_relaxed), start_ns, NowNs()};
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.spans.push_back(span);
  while (g.spans.size() > kSpansKept) g.spans.pop_front();
  if (g.timed && g.timed_spans.size() < kTimedSpansMax) g.timed_spans.push_back(span);
}

Record Snapshot() {
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  return {g.rank, g.groups, {g.ring.begin(), g.ring.end()}, {g.spans.begin(), g.spans.end()},
          g_step.load(), static_cast<Phase>(g_phase.load())};
}

Record TimedRecord() {
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  return {g.rank, g.groups, g.timed_entries, g.timed_spans, g_step.load(), static_cast<Phase>(g_phase.load())};
}

std::string ProgressLine() {
  // Ten times a second: only the newest entry and the groups' counts are
  // read under the lock, never the whole ring.
  nlohmann::json entered = nlohmann::json::object();
  nlohmann::json j = {{"step", g_step.load()}, {"phase", PhaseName(static_cast<Phase>(g_phase.load()))},
                      {"at_ns", NowNs()}};
  Recorder& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  for (size_t i = 0; i < g.groups.size(); ++i) entered[g.groups[i].name] = g.group_seq[i];
  j["entered"] = std::move(entered);
  if (!g.ring.empty()) {
    const Entry& e = g.ring.back();
    j.update({{"group", g.groups.at(e.group).name}, {"seq", e.seq}, {"op", e.op}, {"label", e.label},
              {"state", StateName(e.state)}});
  }
  return j.dump();
}

Progress ParseProgress(const std::string& line) {
  Progress p;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("step")) return p;
  p.step = j.value("step", int64_t{0});
  p.phase = j.value("phase", "");
  p.group = j.value("group", "");
  p.op = j.value("op", "");
  p.label = j.value("label", "");
  p.state = j.value("state", "");
  p.seq = j.value("seq", uint64_t{0});
  p.at_ns = j.value("at_ns", int64_t{0});
  if (j.contains("entered") && j["entered"].is_object())
    for (const auto& [name, seq] : j["entered"].items())
      if (seq.is_number_unsigned()) p.entered[name] = seq.get<uint64_t>();
  p.ok = true;
  return p;
}

std::string Progress::Describe() const {
  std::string where = step > 0 ? "at step " + std::to_string(step) : step < 0 ? "after the last step" : "before the first step";
  where += phase.empty() || phase == "step" ? " (between phases)" : " (in its " + phase + " phase)";
  if (!op.empty())
    where += ", newest collective #" + std::to_string(seq) + " of " + group + " (" + op +
             (label.empty() ? "" : ", " + label) + ", " + state + ")";
  return where;
}

std::string ToJson(const Record& record, const std::string& reason) {
  nlohmann::json groups = nlohmann::json::array(), entries = nlohmann::json::array(),
                 phases = nlohmann::json::array();
  for (const GroupInfo& gi : record.groups) groups.push_back({{"name", gi.name}, {"ranks", gi.ranks}});
  for (const Entry& e : record.entries) entries.push_back(EntryJson(record, e));
  for (const PhaseSpan& s : record.spans)
    phases.push_back({{"phase", PhaseName(s.phase)}, {"step", s.step}, {"start_ns", s.start_ns},
                      {"end_ns", s.end_ns}});
  const nlohmann::json j = {{"format", "ddpbench flight record"}, {"version", 1},
                            {"rank", record.rank}, {"reason", reason},
                            {"clock", "ns since the Unix epoch (each host's own clock)"},
                            {"written_ns", NowNs()}, {"step", record.step}, {"phase", PhaseName(record.phase)},
                            {"groups", groups}, {"entries", entries}, {"phases", phases}};
  return j.dump(1) + "\n";
}

Record FromJson(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || j.value("format", "") != "ddpbench flight record")
    throw std::runtime_error("not a ddpbench flight record");
  try {
    Record r;
    r.rank = j.at("rank").get<int>();
    r.step = j.at("step").get<int64_t>();
    r.phase = PhaseNamed(j.at("phase").get<std::string>());
    std::map<std::string, int> index;
    for (const auto& gj : j.at("groups")) {
      index[gj.at("name").get<std::string>()] = static_cast<int>(r.groups.size());
      r.groups.push_back({gj.at("name").get<std::string>(), gj.at("ranks").get<std::vector<int>>()});
    }
    for (const auto& ej : j.at("entries")) {
      Entry e;
      e.id = ej.at("id").get<uint64_t>();
      e.group = index.at(ej.at("group").get<std::string>());
      e.seq = ej.at("seq").get<uint64_t>();
      e.op = ej.at("op").get<std::string>();
      e.label = ej.at("label").get<std::string>();
      e.bytes = ej.at("bytes").get<int64_t>();
      e.step = ej.at("step").get<int64_t>();
      e.phase = PhaseNamed(ej.at("phase").get<std::string>());
      e.entered_ns = ej.at("entered_ns").get<int64_t>();
      e.ended_ns = ej.value("ended_ns", int64_t{-1});
      e.waited_ns = ej.value("waited_ns", int64_t{-1});
      e.state = StateNamed(ej.at("state").get<std::string>());
      e.peer = ej.value("peer", -1);
      e.tag = ej.value("tag", 0);
      r.entries.push_back(std::move(e));
    }
    for (const auto& pj : j.at("phases"))
      r.spans.push_back({PhaseNamed(pj.at("phase").get<std::string>()), pj.at("step").get<int64_t>(),
                         pj.at("start_ns").get<int64_t>(), pj.at("end_ns").get<int64_t>()});
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("a flight record with a missing or bad field: ") + e.what());
  }
}

}  // namespace ddpbench::flight
