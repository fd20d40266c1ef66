#include "planning/schedules.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"

namespace ddpbench {
namespace {

PipelineTable EmptyTable(int devices, int virtual_stages, int micro_batches) {
  return EmptyPipelineTable(devices, virtual_stages, micro_batches, false);
}

PipelineAction Forward(int m, int chunk) { return {PipelineOp::kForward, m, chunk}; }

}  // namespace

PipelineTable EmptyPipelineTable(int devices, int virtual_stages, int micro_batches, bool v_placement) {
  if (devices < 1 || virtual_stages < 1 || micro_batches < 1 || (v_placement && virtual_stages != 2))
    throw std::logic_error(fmt::format("pipeline table: {} devices, {} chunks each, {} micro-batches", devices,
                                       virtual_stages, micro_batches));
  PipelineTable t;
  t.devices = devices;
  t.virtual_stages = virtual_stages;
  t.micro_batches = micro_batches;
  t.actions.resize(devices);
  t.chunk_device = v_placement ? VPlacement(devices) : RoundRobinPlacement(devices, virtual_stages);
  return t;
}

std::vector<int> RoundRobinPlacement(int devices, int virtual_stages) {
  std::vector<int> map(devices * virtual_stages);
  for (size_t c = 0; c < map.size(); ++c) map[c] = static_cast<int>(c) % devices;
  return map;
}

std::vector<int> VPlacement(int devices) {
  std::vector<int> map(2 * devices);
  for (int d = 0; d < devices; ++d) map[d] = map[2 * devices - 1 - d] = d;
  return map;
}

PipelineSchedule ParsePipelineSchedule(const std::string& name) {
  // Every schedule, in enum order: the names come from PipelineScheduleName only.
  constexpr PipelineSchedule kAll[] = {PipelineSchedule::kGPipe,        PipelineSchedule::k1F1B,
                                       PipelineSchedule::kInterleaved,  PipelineSchedule::kZeroBubble,
                                       PipelineSchedule::kInterleavedZeroBubble, PipelineSchedule::kLoopedBFS,
                                       PipelineSchedule::kZeroBubbleV,  PipelineSchedule::kDualPipeV};
  std::vector<std::string> names;
  for (PipelineSchedule s : kAll) {
    if (PipelineScheduleName(s) == name) return s;
    names.push_back(PipelineScheduleName(s));
  }
  throw ConfigError(fmt::format("--schedule={}: not accepted; accepted values: {}", name, fmt::join(names, "|")));
}

bool NeedsGroupsOfDevices(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kInterleaved || schedule == PipelineSchedule::kInterleavedZeroBubble;
}

bool IsInterleaved(PipelineSchedule schedule) {
  return NeedsGroupsOfDevices(schedule) || schedule == PipelineSchedule::kLoopedBFS;
}

bool IsVShaped(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kZeroBubbleV || schedule == PipelineSchedule::kDualPipeV;
}

int ChunksPerDevice(PipelineSchedule schedule, int virtual_stages) {
  if (IsVShaped(schedule)) return 2;
  if (!IsInterleaved(schedule)) return 1;
  return virtual_stages > 0 ? virtual_stages : 2;
}

int MinMicroBatches(PipelineSchedule schedule, int devices) {
  switch (schedule) {
    case PipelineSchedule::kZeroBubble: return devices;
    case PipelineSchedule::kDualPipeV: return 2 * devices;
    default: return NeedsGroupsOfDevices(schedule) ? devices : 1;
  }
}

bool SplitsBackward(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kZeroBubble || schedule == PipelineSchedule::kInterleavedZeroBubble ||
         IsVShaped(schedule);
}

std::string PipelineScheduleName(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGPipe: return "gpipe";
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
    case PipelineSchedule::kZeroBubble: return "zero-bubble";
    case PipelineSchedule::kInterleavedZeroBubble: return "interleaved-zero-bubble";
    case PipelineSchedule::kLoopedBFS: return "looped-bfs";
    case PipelineSchedule::kZeroBubbleV: return "zbv";
    case PipelineSchedule::kDualPipeV: return "dualpipev";
  }
  return "";
}

PipelineTable GPipeTable(int devices, int micro_batches) {
  PipelineTable t = EmptyTable(devices, 1, micro_batches);
  for (int s = 0; s < devices; ++s) {
    for (int m = 0; m < micro_batches; ++m) t.actions[s].push_back(Forward(m, s));
    for (int m = micro_batches - 1; m >= 0; --m) t.actions[s].push_back({PipelineOp::kBackward, m, s});
  }
  return t;
}

PipelineTable OneFOneBTable(int devices, int micro_batches) {
  PipelineTable t = EmptyTable(devices, 1, micro_batches);
  for (int s = 0; s < devices; ++s) {
    auto& a = t.actions[s];
    const int warmup = std::min(devices - 1 - s, micro_batches);
    int f = 0;
    for (; f < warmup; ++f) a.push_back(Forward(f, s));
    for (int b = 0; b < micro_batches; ++b) {
      if (f < micro_batches) a.push_back(Forward(f++, s));
      a.push_back({PipelineOp::kBackward, b, s});
    }
  }
  return t;
}

// `whole` with each backward cut into B then W: device s runs a W once more
// than s of them wait, and the rest after its last B (ZB-H1's rule: device s
// of a 1F1B table then holds at most S micro-batches, as device 0 does).
static PipelineTable SplitBackwards(PipelineTable whole) {
  for (int s = 0; s < whole.devices; ++s) {
    std::vector<PipelineAction> cut;
    std::deque<PipelineAction> waiting;  // W's still to run
    int backwards = 0;
    for (const PipelineAction& a : whole.actions[s]) backwards += a.op == PipelineOp::kBackward;
    for (const PipelineAction& a : whole.actions[s]) {
      if (a.op != PipelineOp::kBackward) {
        cut.push_back(a);
        continue;
      }
      cut.push_back({PipelineOp::kBackwardInput, a.micro_batch, a.chunk});
      waiting.push_back({PipelineOp::kBackwardWeight, a.micro_batch, a.chunk});
      const bool last = --backwards == 0;
      while (!waiting.empty() && (last || static_cast<int>(waiting.size()) > s)) {
        cut.push_back(waiting.front());
        waiting.pop_front();
      }
    }
    whole.actions[s] = std::move(cut);
  }
  return whole;
}

PipelineTable ZeroBubbleH1Table(int devices, int micro_batches) {
  return SplitBackwards(OneFOneBTable(devices, micro_batches));
}

PipelineTable InterleavedZeroBubbleTable(int devices, int virtual_stages, int micro_batches) {
  return SplitBackwards(InterleavedTable(devices, virtual_stages, micro_batches));
}

PipelineTable InterleavedTable(int devices, int virtual_stages, int micro_batches) {
  const int S = devices, V = virtual_stages, M = micro_batches;
  PipelineTable t = EmptyTable(S, V, M);
  if (M % S != 0)
    throw std::logic_error(fmt::format("interleaved: {} micro-batches is not a multiple of {} devices", M, S));
  const int total = M * V;  // (micro-batch, chunk) pairs per device
  for (int d = 0; d < S; ++d) {
    // The k-th forward (backward) of device d: groups of S micro-batches
    // through the chunks in order (backward: in reverse order).
    auto action = [&](int k, PipelineOp op) {
      const int group = k / (S * V), within = k % (S * V);
      int v = within / S;
      if (op != PipelineOp::kForward) v = V - 1 - v;
      return PipelineAction{op, group * S + within % S, v * S + d};
    };
    auto& a = t.actions[d];
    const int warmup = std::min(total, (S - d - 1) * 2 + (V - 1) * S);
    int f = 0;
    for (; f < warmup; ++f) a.push_back(action(f, PipelineOp::kForward));
    for (int b = 0; b < total; ++b) {
      if (f < total) a.push_back(action(f++, PipelineOp::kForward));
      a.push_back(action(b, PipelineOp::kBackward));
    }
  }
  return t;
}

PipelineTable BuildPipelineTable(PipelineSchedule schedule, int devices, int virtual_stages, int micro_batches) {
  switch (schedule) {
    case PipelineSchedule::kGPipe: return GPipeTable(devices, micro_batches);
    case PipelineSchedule::k1F1B: return OneFOneBTable(devices, micro_batches);
    case PipelineSchedule::kInterleaved: return InterleavedTable(devices, virtual_stages, micro_batches);
    case PipelineSchedule::kZeroBubble: return ZeroBubbleH1Table(devices, micro_batches);
    case PipelineSchedule::kInterleavedZeroBubble:
      return InterleavedZeroBubbleTable(devices, virtual_stages, micro_batches);
    case PipelineSchedule::kLoopedBFS: return LoopedBfsTable(devices, virtual_stages, micro_batches);
    case PipelineSchedule::kZeroBubbleV: return ZeroBubbleVTable(devices, micro_batches);
    case PipelineSchedule::kDualPipeV: return DualPipeVTable(devices, micro_batches);
  }
  throw std::logic_error("unknown pipeline schedule");
}

double PipelineSimulation::Bubble() const {
  if (makespan <= 0) return 0;
  return 1.0 - std::accumulate(busy.begin(), busy.end(), 0.0) / (busy.size() * makespan);
}

ChunkTimes SplitChunkTimes(const std::vector<double>& forward, const std::vector<double>& backward) {
  ChunkTimes times;
  for (size_t c = 0; c < forward.size(); ++c) {
    times.forward.push_back(forward[c]);
    times.backward_input.push_back(c == 0 ? 0.0 : backward[c] / 2);
    times.backward_weight.push_back(c == 0 ? backward[c] : backward[c] / 2);
  }
  return times;
}

ChunkTimes UniformChunkTimes(int chunks) {
  return {std::vector<double>(chunks, 1.0), std::vector<double>(chunks, 1.0), std::vector<double>(chunks, 1.0), {}};
}

PipelineSimulation SimulatePipeline(const PipelineTable& t, const ChunkTimes& times) {
  const int S = t.devices, C = t.chunks();
  using Key = std::tuple<char, int, int>;  // op, micro-batch, chunk
  std::map<Key, double> end;               // finish time of each action run
  std::map<Key, double> arrive;            // when its output reaches the chunk after (F) or before (B, b)
  std::vector<double> link_free(2 * C, 0.0);  // per boundary and direction
  auto done = [&](char op, int m, int c) { return end.count({op, m, c}) > 0; };
  // An output handed to another chunk: after the hand-off, one at a time on
  // the boundary's direction.
  auto hand_on = [&](const Key& k, double at, int boundary, int direction) {
    const double ms = boundary < static_cast<int>(times.handoff.size()) ? times.handoff[boundary] : 0.0;
    double& free_at = link_free[2 * boundary + direction];
    arrive[k] = ms > 0 ? (free_at = std::max(at, free_at) + ms) : at;
  };
  PipelineSimulation sim;
  sim.busy.assign(S, 0.0);
  sim.peak_in_flight.assign(S, 0);
  std::vector<double> free(S, 0.0);
  std::vector<int> held(S, 0);
  std::vector<size_t> next(S, 0);
  size_t left = 0;
  for (auto& a : t.actions) left += a.size();
  while (left > 0) {
    bool progressed = false;
    for (int d = 0; d < S; ++d) {
      if (next[d] == t.actions[d].size()) continue;
      const PipelineAction& a = t.actions[d][next[d]];
      const int m = a.micro_batch, c = a.chunk;
      // The input gradient of chunk c+1 comes from its B or whole backward.
      auto grad_from = [&](int chunk) { return done('B', m, chunk) ? 'B' : 'b'; };
      std::vector<std::pair<Key, bool>> deps;  // the action, and whether another chunk handed it on
      if (a.op == PipelineOp::kForward) {
        if (c > 0) deps.push_back({{'F', m, c - 1}, true});
      } else if (a.op == PipelineOp::kBackwardWeight) {
        deps.push_back({{'B', m, c}, false});
      } else {
        deps.push_back({{'F', m, c}, false});
        if (c + 1 < C) deps.push_back({{grad_from(c + 1), m, c + 1}, true});
      }
      double start = free[d];
      bool ready = true;
      for (const auto& [k, handed] : deps) {
        if (!done(std::get<0>(k), std::get<1>(k), std::get<2>(k))) ready = false;
        else start = std::max(start, handed ? arrive.at(k) : end.at(k));
      }
      if (!ready) continue;
      double ms = a.op == PipelineOp::kForward          ? times.forward.at(c)
                  : a.op == PipelineOp::kBackwardInput  ? times.backward_input.at(c)
                  : a.op == PipelineOp::kBackwardWeight ? times.backward_weight.at(c)
                                                        : times.backward_input.at(c) + times.backward_weight.at(c);
      const Key key{static_cast<char>(a.op), m, c};
      end[key] = free[d] = start + ms;
      if (a.op == PipelineOp::kForward && c + 1 < C) hand_on(key, start + ms, c, 0);
      if ((a.op == PipelineOp::kBackward || a.op == PipelineOp::kBackwardInput) && c > 0) hand_on(key, start + ms, c - 1, 1);
      sim.busy[d] += ms;
      if (a.op == PipelineOp::kForward) sim.peak_in_flight[d] = std::max(sim.peak_in_flight[d], ++held[d]);
      if (a.op == PipelineOp::kBackward || a.op == PipelineOp::kBackwardWeight) --held[d];
      ++next[d];
      --left;
      progressed = true;
    }
    if (!progressed) {
      sim.deadlock = true;
      break;
    }
  }
  sim.makespan = *std::max_element(free.begin(), free.end());
  sim.finish = free;
  return sim;
}

double TheoreticalBubble(int devices, int virtual_stages, int micro_batches) {
  return static_cast<double>(devices - 1) / (virtual_stages * micro_batches + devices - 1);
}

double LoopedBfsTheoreticalBubble(int devices, int virtual_stages, int micro_batches) {
  const int S = devices, V = virtual_stages, M = micro_batches;
  return 1.0 - static_cast<double>(V * M) / (V * std::max(M, S) + std::min(M, S) - 1);
}

}  // namespace ddpbench
