// --trace=FILE.json: a Chrome trace (Trace Event Format; Perfetto,
// chrome://tracing) of the run, recorded by the program itself, so a timeline
// needs neither Nsight nor an NVTX tool. Every NvtxRange is also a complete
// ("X") event here, with the same name, on its thread's track (process = rank);
// asynchronous collectives are recorded from launch to completion on "comm"
// tracks. When tracing is off each range costs one relaxed load and a branch.
//
// Threads keep their own open-range stacks and event lists (no shared lock on
// the hot path); Finish serialises them once, at the end of the run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace ddpbench {

struct DistContext;

namespace trace {

using Clock = std::chrono::steady_clock;

extern std::atomic<bool> g_enabled;
inline bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

// Starts recording (events before this are not kept); the calling thread is
// this rank's "main" track.
void Start();

// Names the calling thread's track; `order` sorts tracks (main 0, device
// workers 1 + index). Kept even while tracing is off.
void NameThread(const std::string& name, int order);

// The calling thread's ranges (NvtxRange calls these). `name` must outlive the
// run (a literal). Annotate adds an argument to the innermost open range.
void Begin(const char* name);
void End();
void Annotate(const char* key, int64_t value);
void Annotate(const char* key, const char* value);

// An asynchronous collective (`name`, e.g. "all-reduce", of `bucket`) from
// its launch to its completion, on this rank's comm tracks (one lane per
// collective in flight at once). Any thread may call it.
void Collective(const char* name, int64_t bucket, Clock::time_point start, Clock::time_point end);

// Collective over `dist`'s ranks: stops recording; rank 0 gathers every
// rank's events (through the rendezvous store) and writes them to `path`,
// one process per rank. Returns `path` when written, "" otherwise (a failed
// write is logged, not fatal: the row still gets written).
std::string Finish(const std::string& path, DistContext& dist, const std::string& command);

// This rank's events as Trace Event Format objects (comma-separated, no
// brackets), timestamps in µs since `origin_ns` (steady clock). For tests.
std::string SerializeRank(int rank, int64_t origin_ns);

}  // namespace trace
}  // namespace ddpbench
