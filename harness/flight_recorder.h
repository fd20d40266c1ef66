// The flight recorder: each rank keeps its last N collectives (which group,
// which one in that group's order, what, how many bytes, when it was entered
// and when it ended, and whether it completed) and the phases it went
// through. When a collective times out or a rank dies, the records say which
// rank never entered which collective and what that rank was doing last
// (harness/stuck_report.h). The same entries, kept for every timed step, are
// what the straggler attribution reads (harness/straggler.h).
//
// Entries are written by the recording process-group backend
// (harness/recording_backend.h) for every collective any part of ddpbench
// issues, so no strategy records anything itself; phases are written by
// PhaseTimer::Scope. Times are nanoseconds on the system clock (steady
// clock plus the offset read when the recorder starts), comparable across
// ranks as far as their hosts' clocks agree.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/phase.h"

namespace ddpbench::flight {

enum class State { kEntered, kCompleted, kFailed };
const char* StateName(State state);

struct Entry {
  uint64_t id = 0;     // this rank's record number, from 1
  int group = 0;       // index into Groups()
  uint64_t seq = 0;    // its place in the group's order; send/recv: on its channel
  std::string op;      // allreduce, broadcast, allgather, send, recv, ...
  std::string label;   // what ddpbench was doing (CollectiveLabel), "" if unnamed
  int peer = -1;       // send/recv: the other rank (global); else -1
  int tag = 0;         // send/recv
  int64_t bytes = 0;
  int64_t step = 0;    // the training step it was entered in (0: before the first; -1: after the last)
  Phase phase = Phase::kStep;  // the phase the rank was in (kStep: none)
  int64_t entered_ns = 0, ended_ns = -1;
  int64_t waited_ns = -1;  // when this rank first waited for it (a receive posted early is needed then)
  State state = State::kEntered;
};

struct GroupInfo {
  std::string name;        // world, group0, replicate1, ...
  std::vector<int> ranks;  // global ranks, in the group's order
};

struct PhaseSpan {
  Phase phase = Phase::kStep;
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;
};

// The whole record of one rank, as written to its JSON file and as the
// straggler attribution reads it.
struct Record {
  int rank = 0;
  std::vector<GroupInfo> groups;
  std::vector<Entry> entries;   // oldest first
  std::vector<PhaseSpan> spans;  // oldest first
  int64_t step = 0;
  Phase phase = Phase::kStep;
};

// Starts recording for `rank`, keeping the last `capacity` entries (0: off,
// nothing is recorded), its record to be written to `path` when asked.
// Timed steps' entries and spans are kept apart, all of them, for the
// straggler attribution (up to a bound).
void Configure(int rank, size_t capacity, const std::string& path);
std::string RecordPath();
// Where rank `rank`'s record goes: beside the results file `out`
// (r.csv -> r.flight/rank-1.json), else ddpbench-flight/rank-1.json.
std::string RecordPathFor(const std::string& out, int rank);
// Writes this rank's record (ToJson(Snapshot())) to RecordPath(), once per
// process (the first reason is the cause); the path when this call wrote
// it, else "" (written before, or it could not be written: logged).
std::string WriteRecord(const std::string& reason);
bool Enabled();
int64_t NowNs();

// A process group joins the record: its name and members (global ranks).
int RegisterGroup(const std::string& name, const std::vector<int>& ranks);

// A collective (or send/recv, with `peer` its rank in the group) is entered,
// under `label` (CollectiveLabel's, or null); returns its id for End (0 when
// recording is off).
uint64_t Enter(int group, const char* op, int peer, int tag, int64_t bytes, const char* label);
void End(uint64_t id, bool ok);
// This rank starts waiting for entry `id` (the first wait counts).
void Waited(uint64_t id);
// Whether a kept entry failed (a timeout or a lost peer, whichever thread met it).
bool HasFailed();

// The step loop: step `step` starts (timed or warm-up); -1 after the last.
void BeginStep(int64_t step, bool timed);
// PhaseTimer::Scope: a phase starts and ends on the calling thread.
int64_t PhaseBegin(Phase phase);
void PhaseEnd(Phase phase, int64_t start_ns);

// The last `capacity` entries and the latest spans.
Record Snapshot();
// Every timed step's entries and spans (the straggler attribution's input).
Record TimedRecord();

// One line for the store, read by rank 0 or the launcher when this rank is
// silent: step, phase, the last collective entered in each group, and the
// newest entry (its group, seq, op, label, state). ParseProgress reads it back.
std::string ProgressLine();
struct Progress {
  int64_t step = 0;
  std::string phase;
  std::string group, op, label, state;
  uint64_t seq = 0;
  std::map<std::string, uint64_t> entered;  // group -> the last collective entered
  int64_t at_ns = 0;  // when the line was written
  bool ok = false;
  // "at step 10 (between phases), after collective #56 of world (allreduce, completed)"
  std::string Describe() const;
};
Progress ParseProgress(const std::string& line);

// JSON (self-describing: version, rank, reason, groups, entries, phases).
std::string ToJson(const Record& record, const std::string& reason);
Record FromJson(const std::string& text);  // throws std::runtime_error on a bad file

}  // namespace ddpbench::flight
