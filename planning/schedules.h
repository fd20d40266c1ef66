// Pipeline schedules as data. A schedule is a table: for each device, the
// ordered actions it runs (forward, backward, or the backward cut into its
// input part B and weight part W; which micro-batch; which model chunk). One
// small function builds each schedule's table, the tests check the tables,
// and the pipeline engine (pipeline.cpp) runs any of them, as Megatron's
// schedule tables and torch.distributed.pipelining's runtime do.
//
// Where each model chunk lives is data of the table (chunk_device): chunk c
// of C = devices x V on device c % devices (round-robin, Megatron's
// interleaved placement) unless a schedule sets another map, such as the V
// placement of ZB-V and DualPipeV; V = 1 is one contiguous stage a device.
// Pure logic; exposed for tests.
#pragma once

#include <string>
#include <vector>

namespace ddpbench {

enum class PipelineOp : char {
  kForward = 'F',
  kBackward = 'b',        // the whole backward: input and weight gradients
  kBackwardInput = 'B',   // the input gradient only (zero-bubble)
  kBackwardWeight = 'W',  // the weight gradients of an earlier B
};

struct PipelineAction {
  PipelineOp op = PipelineOp::kForward;
  int micro_batch = 0;
  int chunk = 0;
  bool operator==(const PipelineAction& o) const {
    return op == o.op && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

struct PipelineTable {
  int devices = 1, virtual_stages = 1, micro_batches = 1;
  std::vector<std::vector<PipelineAction>> actions;  // per device, in order
  std::vector<int> chunk_device;                     // per chunk: the device it lives on
  int chunks() const { return devices * virtual_stages; }
  int DeviceOf(int chunk) const { return chunk_device.at(chunk); }
};

// Chunk -> device maps for PipelineTable::chunk_device. Round-robin: chunk c
// on device c % devices. V (two chunks a device): chunks 0..S-1 down the
// devices, chunks S..2S-1 back up, so device 0 holds the first and the last.
std::vector<int> RoundRobinPlacement(int devices, int virtual_stages);
std::vector<int> VPlacement(int devices);
// A table with no actions yet: round-robin placement, or the V (2 chunks a device).
PipelineTable EmptyPipelineTable(int devices, int virtual_stages, int micro_batches, bool v_placement);

// Values are kept in snapshots (meta.shape): new ones go at the end.
enum class PipelineSchedule {
  kGPipe, k1F1B, kInterleaved, kZeroBubble, kInterleavedZeroBubble, kLoopedBFS, kZeroBubbleV, kDualPipeV
};
// gpipe|1f1b|interleaved|zero-bubble|interleaved-zero-bubble|looped-bfs|zbv|
// dualpipev; ConfigError otherwise.
PipelineSchedule ParsePipelineSchedule(const std::string& name);
// The --schedule name of `schedule` (the inverse of ParsePipelineSchedule).
std::string PipelineScheduleName(PipelineSchedule schedule);
// V chunks per device placed round-robin, taken from --virtual-stages
// (interleaved, interleaved-zero-bubble, looped-bfs).
bool IsInterleaved(PipelineSchedule schedule);
// Micro-batches taken in groups of the device count (interleaved and
// interleaved-zero-bubble): the count must be a multiple of it.
bool NeedsGroupsOfDevices(PipelineSchedule schedule);
// Two chunks per device placed in a V (zbv, dualpipev).
bool IsVShaped(PipelineSchedule schedule);
// Chunks per device of `schedule` with --virtual-stages=V (0: not given).
int ChunksPerDevice(PipelineSchedule schedule, int virtual_stages);
// The fewest micro-batches `schedule` runs on `devices` (dualpipev: 2S).
int MinMicroBatches(PipelineSchedule schedule, int devices);
// The backward cut into B and W (dualpipev: in its drain only).
bool SplitsBackward(PipelineSchedule schedule);

// All forwards, then all backwards (last micro-batch first).
PipelineTable GPipeTable(int devices, int micro_batches);
// 1F1B (PipeDream-Flush): S-1-s warm-up forwards, then one forward one
// backward, then the remaining backwards; device s holds S-s micro-batches.
PipelineTable OneFOneBTable(int devices, int micro_batches);
// Interleaved 1F1B (Megatron-LM): V chunks per device, micro-batches taken in
// groups of S through the chunks; needs micro_batches a multiple of devices.
PipelineTable InterleavedTable(int devices, int virtual_stages, int micro_batches);
// ZB-H1 (Qi et al.): 1F1B's order with each backward cut into B and W;
// device s defers up to s W's, which fill the bubbles of the drain, so every
// device holds at most S micro-batches, as 1F1B's first device does.
PipelineTable ZeroBubbleH1Table(int devices, int micro_batches);
// Interleaved 1F1B's order with ZB-H1's cut: each backward becomes B, which
// hands the input gradient upstream at once, then its W, with up to s W's
// waiting on device s (torch.distributed.pipelining's interleaved zero
// bubble). The W's that used to sit between a chunk's input gradient and the
// chunk before it leave the critical path; a device holds no more
// micro-batches than interleaved's first device does.
PipelineTable InterleavedZeroBubbleTable(int devices, int virtual_stages, int micro_batches);
// Looped BFS (torch.distributed.pipelining's ScheduleLoopedBFS): V chunks
// round-robin; each device runs every micro-batch through its first chunk,
// then its next, and the backwards in reverse (last chunk, last micro-batch first).
PipelineTable LoopedBfsTable(int devices, int virtual_stages, int micro_batches);
// ZB-V (Qi et al., section 6; ScheduleZBVZeroBubble): 2 chunks a device in a
// V, backward cut into B and W; with F = B = W and M >= 2S its bubble is
// close to zero while a device holds no more activations than 1F1B's first.
PipelineTable ZeroBubbleVTable(int devices, int micro_batches);
// DualPipeV (DeepSeek-V3's DualPipe in a V; ScheduleDualPipeV): 2 chunks a
// device in a V; the steady state pairs a forward on one leg with a whole
// backward on the other; the drain cuts backwards into B and W. M >= 2S.
PipelineTable DualPipeVTable(int devices, int micro_batches);
PipelineTable BuildPipelineTable(PipelineSchedule schedule, int devices, int virtual_stages, int micro_batches);

// Milliseconds of each action kind on each chunk (kBackward: input + weight).
struct ChunkTimes {
  std::vector<double> forward, backward_input, backward_weight;
  // Per boundary c (chunk c to c + 1): ms an activation takes to reach the
  // next chunk's device and its gradient to come back; each direction of a
  // boundary carries one at a time, and neither device is busy meanwhile.
  // Empty or 0: handed over at once (one device, or not modelled).
  std::vector<double> handoff;
};

// The table run on ideal devices: every action starts once its device is
// free and its inputs exist (forward of chunk c-1; input gradient of chunk
// c+1, each after its hand-off; its own forward; its own B). Reports a
// deadlock instead of hanging.
struct PipelineSimulation {
  bool deadlock = false;
  double makespan = 0;
  std::vector<double> busy;         // per device
  std::vector<int> peak_in_flight;  // per device: micro-batch x chunk activations held at once
  std::vector<double> finish;       // per device: when its last action ends
  double Bubble() const;            // 1 - sum(busy) / (devices x makespan)
};
PipelineSimulation SimulatePipeline(const PipelineTable& table, const ChunkTimes& times);
// Chunk times from each chunk's forward and whole backward: the backward cut
// into equal input (B) and weight (W) halves, except the first chunk's, which
// has no input gradient to compute (all W).
ChunkTimes SplitChunkTimes(const std::vector<double>& forward, const std::vector<double>& backward);
// Equal chunks: forward 1, input gradient 1, weight gradient 1.
ChunkTimes UniformChunkTimes(int chunks);

// Idle fraction of an ideal pipeline of equal stages with V chunks per
// device: (S-1)/(V*M + S-1), i.e. GPipe's and 1F1B's (S-1)/(M+S-1) at V=1.
double TheoreticalBubble(int devices, int virtual_stages, int micro_batches);
// Looped BFS's: the same when M >= S; with fewer micro-batches than devices
// each loop waits for micro-batch 0 to come round, and the step is the
// chain of one micro-batch through all V*S chunks plus M-1:
// 1 - V*M / (V*max(M, S) + min(M, S) - 1).
double LoopedBfsTheoreticalBubble(int devices, int virtual_stages, int micro_batches);

}  // namespace ddpbench
