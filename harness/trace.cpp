#include "harness/trace.h"


#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/dist.h"
#include "base/log.h"
#include "base/results.h"

namespace ddpbench::trace {

std::atomic<bool> g_enabled{false};

namespace {

int64_t Ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct Event {
  const char* name;
  int64_t start_ns, end_ns;
  int depth;  // open ranges around it on its thread (-1: a collective)
  std::string args;  // JSON members, e.g. "\"micro_batch\":2"
};

// One thread's closed ranges; its mutex is taken by the owner for each
// append (uncontended) and by Finish once.
struct ThreadBuffer {
  std::mutex mutex;
  std::string name;
  int order = 0;
  std::vector<Event> events;
};

struct Frame {
  const char* name;
  int64_t start_ns;
  std::string args;
};

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<ThreadBuffer>> threads;
  std::vector<Event> collectives;  // under `mutex`: few per step
  int64_t steady_start_ns = 0, system_start_ns = 0;
};
Registry& Global() {
  static Registry* registry = new Registry();  // never destroyed: threads may outlive main's statics
  return *registry;
}

thread_local std::string t_name;
thread_local int t_order = -1;
thread_local ThreadBuffer* t_buffer = nullptr;
thread_local std::vector<Frame> t_stack;

ThreadBuffer& MyBuffer() {
  if (t_buffer) return *t_buffer;
  Registry& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.threads.push_back(std::make_unique<ThreadBuffer>());
  t_buffer = g.threads.back().get();
  const int unnamed = 100 + static_cast<int>(g.threads.size());
  t_buffer->name = t_name.empty() ? fmt::format("thread {}", unnamed) : t_name;
  t_buffer->order = t_order >= 0 ? t_order : unnamed;
  return *t_buffer;
}

void AppendMember(std::string& args, const char* key, const std::string& json_value) {
  if (!args.empty()) args += ',';
  args += fmt::format("\"{}\":{}", key, json_value);
}

// A JSON string literal (nlohmann's escaping; bytes that are not UTF-8, as a
// command line may hold, become U+FFFD rather than an error).
std::string JsonString(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Nanoseconds as microseconds with three exact decimals.
std::string Micros(int64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); }

std::string Metadata(const char* what, int pid, int tid, const std::string& name, int sort) {
  const std::string thread = tid >= 0 ? fmt::format(",\"tid\":{}", tid) : "";
  const char* sort_what = std::strcmp(what, "process_name") == 0 ? "process_sort_index" : "thread_sort_index";
  return fmt::format("{{\"ph\":\"M\",\"pid\":{}{},\"name\":\"{}\",\"args\":{{\"name\":{}}}}},"
                     "{{\"ph\":\"M\",\"pid\":{}{},\"name\":\"{}\",\"args\":{{\"sort_index\":{}}}}}",
                     pid, thread, what, JsonString(name), pid, thread, sort_what, sort);
}

// Events of one track, ordered by start (outer before inner at equal starts).
void AppendTrack(std::string& out, int pid, int tid, std::vector<Event> events, int64_t shift_ns) {
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  for (const Event& e : events) {
    std::string args = e.args;
    if (e.depth >= 0) AppendMember(args, "depth", std::to_string(e.depth));
    out += fmt::format(",{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"name\":{},\"ts\":{},\"dur\":{},\"args\":{{{}}}}}",
                       pid, tid, JsonString(e.name), Micros(e.start_ns + shift_ns), Micros(e.end_ns - e.start_ns),
                       args);
  }
}

// Collectives in lanes: each lane holds ones that do not overlap, so every
// comm track nests as a thread's does.
std::vector<std::vector<Event>> Lanes(std::vector<Event> events) {
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.start_ns < b.start_ns; });
  std::vector<std::vector<Event>> lanes;
  for (Event& e : events) {
    auto free = std::find_if(lanes.begin(), lanes.end(),
                             [&](const std::vector<Event>& lane) { return lane.back().end_ns <= e.start_ns; });
    if (free == lanes.end()) free = lanes.insert(lanes.end(), std::vector<Event>{});
    free->push_back(std::move(e));
  }
  return lanes;
}

}  // namespace

void Start() {
  Registry& g = Global();
  NameThread("main", 0);
  std::lock_guard<std::mutex> lock(g.mutex);
  for (auto& t : g.threads) {
    std::lock_guard<std::mutex> thread_lock(t->mutex);
    t->events.clear();
  }
  g.collectives.clear();
  g.steady_start_ns = Ns(Clock::now());
  g.system_start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  g_enabled.store(true);
}

void NameThread(const std::string& name, int order) {
  t_name = name;
  t_order = order;
  if (t_buffer) {
    std::lock_guard<std::mutex> lock(t_buffer->mutex);
    t_buffer->name = name;
    t_buffer->order = order;
  }
}

void Begin(const char* name) { t_stack.push_back({name, Ns(Clock::now()), {}}); }

void End() {
  if (t_stack.empty()) return;
  const int64_t end = Ns(Clock::now());
  Frame frame = std::move(t_stack.back());
  t_stack.pop_back();
  ThreadBuffer& buffer = MyBuffer();
  std::lock_guard<std::mutex> lock(buffer.mutex);
  buffer.events.push_back({frame.name, frame.start_ns, end, static_cast<int>(t_stack.size()), std::move(frame.args)});
}

void Annotate(const char* key, int64_t value) {
  if (Enabled() && !t_stack.empty()) AppendMember(t_stack.back().args, key, std::to_string(value));
}
void Annotate(const char* key, const char* value) {
  if (Enabled() && !t_stack.empty()) AppendMember(t_stack.back().args, key, JsonString(value));
}

void Collective(const char* name, int64_t bucket, Clock::time_point start, Clock::time_point end) {
  if (!Enabled()) return;
  Registry& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.collectives.push_back({name, Ns(start), Ns(end), -1, fmt::format("\"bucket\":{}", bucket)});
}

std::string SerializeRank(int rank, int64_t origin_ns) {
  Registry& g = Global();
  std::lock_guard<std::mutex> lock(g.mutex);
  // Steady-clock events on the system clock (comparable across hosts as far
  // as their clocks agree), then relative to the run's origin.
  const int64_t shift = g.system_start_ns - g.steady_start_ns - origin_ns;
  auto kept = [&](std::vector<Event> events) {  // only what happened after Start
    events.erase(std::remove_if(events.begin(), events.end(),
                                [&](const Event& e) { return e.start_ns < g.steady_start_ns; }),
                 events.end());
    return events;
  };
  std::string out = Metadata("process_name", rank, -1, fmt::format("rank {}", rank), rank);
  std::vector<ThreadBuffer*> threads;
  for (auto& t : g.threads) threads.push_back(t.get());
  std::stable_sort(threads.begin(), threads.end(), [](auto* a, auto* b) { return a->order < b->order; });
  int tid = 0;
  for (ThreadBuffer* t : threads) {
    std::lock_guard<std::mutex> thread_lock(t->mutex);
    std::vector<Event> events = kept(t->events);
    if (events.empty()) continue;
    out += "," + Metadata("thread_name", rank, tid, t->name, tid);
    AppendTrack(out, rank, tid++, std::move(events), shift);
  }
  auto lanes = Lanes(kept(g.collectives));
  for (size_t i = 0; i < lanes.size(); ++i) {
    const int lane_tid = 1000 + static_cast<int>(i);
    out += "," + Metadata("thread_name", rank, lane_tid, i == 0 ? "comm" : fmt::format("comm {}", i + 1), lane_tid);
    AppendTrack(out, rank, lane_tid, std::move(lanes[i]), shift);
  }
  return out;
}

std::string Finish(const std::string& path, DistContext& dist, const std::string& command) {
  if (path.empty()) return "";
  g_enabled.store(false);
  int64_t system_start_ns;
  {
    std::lock_guard<std::mutex> lock(Global().mutex);
    system_start_ns = Global().system_start_ns;
  }
  // The earliest rank's start is time 0 (whole µs since the epoch: exact in
  // the double the figures are gathered as, and never after a rank's start).
  const std::vector<double> starts = dist.AllGather({static_cast<double>(system_start_ns / 1000)});
  const auto origin = static_cast<int64_t>(*std::min_element(starts.begin(), starts.end())) * 1000;
  const std::vector<std::string> ranks = dist.GatherTextToRoot("trace", SerializeRank(dist.rank, origin), "trace gather");
  if (!dist.is_root()) return "";
  std::string text = "{\"traceEvents\":[";
  for (size_t r = 0; r < ranks.size(); ++r) text += (r ? "," : "") + ranks[r];
  text += fmt::format("],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"command\":{},\"ranks\":{}}}}}\n",
                      JsonString(command), dist.world);
  try {
    ReplaceFile(path, text);
  } catch (const ResultsError& e) {
    LogError("--trace={}: could not write the trace ({}); the row is written without it", path, e.what());
    return "";
  }
  LogInfo("trace: {} ranks -> {}", dist.world, path);
  return path;
}

}  // namespace ddpbench::trace
