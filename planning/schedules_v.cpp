// The three pipeline schedules of torch.distributed.pipelining (PyTorch 2.11)
// that pmp's first five did not cover, as tables for the same engine (issue
// 27): looped BFS (breadth-first over round-robin chunks, Lamy-Poirier 2023),
// ZB-V (the zero-bubble V schedule, Qi et al. 2024, section 6) and DualPipeV
// (DeepSeek-V3's DualPipe folded into a V). Each device's order of actions is
// the one PyTorch's schedule class produces for it, so a run of ours and a
// run of PyTorch's do the same work in the same order; the rules are restated
// here from the papers and that order, in this file's own terms.
#include "planning/schedules.h"

#include <algorithm>
#include <deque>
#include <stdexcept>

#include <fmt/format.h>

namespace ddpbench {
namespace {

constexpr PipelineOp F = PipelineOp::kForward, B = PipelineOp::kBackwardInput, W = PipelineOp::kBackwardWeight,
                     kWhole = PipelineOp::kBackward;

// One device's row of a V schedule, written action by action. The device
// holds the down chunk (`down` = d) and the up chunk (2S-1-d); each op of each
// chunk takes micro-batches in order, so an action names only its op and
// chunk. Micro-batches at or past `keep` are left out (ZB-V plans for at
// least 2S-1 and drops the rest).
class VRow {
 public:
  VRow(std::vector<PipelineAction>* row, int down, int up, int keep) : row_(row), down_(down), up_(up), keep_(keep) {}
  int down() const { return down_; }
  int up() const { return up_; }
  int Count(PipelineOp op, int chunk) const { return next_[Index(op)][chunk == down_ ? 0 : 1]; }

  // The next micro-batch's op on `chunk`. A B queues its W for TakeW.
  void Add(PipelineOp op, int chunk) {
    // kWhole and B share a counter: both are "the next backward".
    int& n = next_[Index(op == kWhole ? B : op)][chunk == down_ ? 0 : 1];
    const int m = n++;
    if (op == kWhole) ++next_[Index(W)][chunk == down_ ? 0 : 1];
    if (op == B) pending_w_.push_back({W, m, chunk});
    if (op == W) {
      auto it = std::find(pending_w_.begin(), pending_w_.end(), PipelineAction{W, m, chunk});
      if (it != pending_w_.end()) pending_w_.erase(it);
    }
    if (m < keep_) row_->push_back({op, m, chunk});
  }
  // The oldest W whose B has run, if any.
  void TakeW() {
    if (pending_w_.empty()) return;
    const PipelineAction w = pending_w_.front();
    pending_w_.pop_front();
    ++next_[Index(W)][w.chunk == down_ ? 0 : 1];
    if (w.micro_batch < keep_) row_->push_back(w);
  }
  void TakeAllW() {
    while (!pending_w_.empty()) TakeW();
  }

 private:
  static int Index(PipelineOp op) { return op == F ? 0 : op == B ? 1 : 2; }
  std::vector<PipelineAction>* row_;
  const int down_, up_, keep_;
  int next_[3][2] = {};  // [F, B, W][down, up]
  std::deque<PipelineAction> pending_w_;
};

}  // namespace

PipelineTable LoopedBfsTable(int devices, int virtual_stages, int micro_batches) {
  const int S = devices, V = virtual_stages, M = micro_batches;
  PipelineTable t = EmptyPipelineTable(S, V, M, /*v_placement=*/false);
  // Breadth first: every micro-batch through a device's first chunk, then
  // its next; the backwards the other way round, last micro-batch first.
  for (int d = 0; d < S; ++d) {
    for (int v = 0; v < V; ++v)
      for (int m = 0; m < M; ++m) t.actions[d].push_back({F, m, v * S + d});
    for (int v = V - 1; v >= 0; --v)
      for (int m = M - 1; m >= 0; --m) t.actions[d].push_back({kWhole, m, v * S + d});
  }
  return t;
}

PipelineTable ZeroBubbleVTable(int devices, int micro_batches) {
  const int S = devices, M = micro_batches;
  PipelineTable t = EmptyPipelineTable(S, 2, M, /*v_placement=*/true);
  const int planned = std::max(2 * S - 1, M);  // enough to fill the V; the extra ones are dropped
  for (int d = 0; d < S; ++d) {
    VRow r(&t.actions[d], d, 2 * S - 1 - d, M);
    const int down = r.down(), up = r.up();
    // Warm-up: fill the down leg, then alternate, then start the up leg's backwards.
    for (int i = 0; i < 2 * (S - d) - 1; ++i) r.Add(F, down);
    for (int i = 0; i < d; ++i) r.Add(F, up), r.Add(F, down);
    for (int i = 0; i < S - d; ++i) r.Add(F, up), r.Add(B, up), r.Add(W, up);
    // Steady state: a forward, B and W on each leg.
    while (r.Count(F, up) < r.Count(F, down) || r.Count(F, down) < planned) {
      if (r.Count(F, down) < planned) r.Add(F, down);
      r.Add(B, down), r.Add(W, down);
      r.Add(F, up), r.Add(B, up), r.Add(W, up);
    }
    // Cool-down: the last B's, with W's filling the gaps, then the W's left.
    for (int i = 0; i < d; ++i) r.Add(B, down), r.Add(B, up);
    for (int i = 0; i < S - d; ++i) r.Add(B, down), r.Add(W, down);
    while (r.Count(W, up) < r.Count(B, up)) r.Add(W, up);
    while (r.Count(W, down) < r.Count(B, down)) r.Add(W, down);
  }
  return t;
}

PipelineTable DualPipeVTable(int devices, int micro_batches) {
  const int S = devices, M = micro_batches;
  if (M < 2 * S)
    throw std::logic_error(fmt::format("dualpipev: {} micro-batches, fewer than its {} stages", M, 2 * S));
  PipelineTable t = EmptyPipelineTable(S, 2, M, /*v_placement=*/true);
  for (int d = 0; d < S; ++d) {
    VRow r(&t.actions[d], d, 2 * S - 1 - d, M);
    const int down = r.down(), up = r.up();
    for (int i = 0; i < 2 * (S - d - 1); ++i) r.Add(F, down);
    for (int i = 0; i < d + 1; ++i) r.Add(F, down), r.Add(F, up);
    for (int i = 0; i < S - d - 1; ++i) r.Add(B, up), r.TakeW(), r.Add(F, up);
    // The main part: pairs of a forward on one leg and a whole backward on
    // the other (DualPipe overlaps each pair; one device thread runs them in turn).
    for (int i = 0; i < M - 2 * S + d + 1; ++i) r.Add(F, down), r.Add(kWhole, up), r.Add(F, up), r.Add(kWhole, down);
    for (int i = 0; i < S - d - 1; ++i) r.Add(kWhole, up), r.Add(F, up), r.Add(kWhole, down);
    // The drain: whole backwards until half-way, then B's whose W's fill the end.
    bool split = false;
    for (int i = 0; i < d + 1; ++i) {
      if (i == (d + 1) / 2 && d % 2 == 1) split = true;
      r.Add(split ? B : kWhole, up);
      if (i == (d + 1) / 2 && d % 2 == 0) split = true;
      r.Add(split ? B : kWhole, down);
    }
    for (int i = 0; i < S - d - 1; ++i) r.TakeW(), r.Add(split ? B : kWhole, down);
    for (int i = 0; i < d + 1; ++i) r.TakeW();
    r.TakeAllW();
  }
  return t;
}

}  // namespace ddpbench
