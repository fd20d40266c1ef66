// The schedule walk: a device's row of the table, action by action.
#include "strategies/pipeline/walk.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "base/config.h"
#include "harness/memory.h"
#include "harness/trace.h"
#include "harness/training.h"
#include "strategies/pipeline/overlap_step.h"

namespace ddpbench::pipeline {
namespace {

class Walk {
 public:
  Walk(Engine& e, Transport& transport, StepState& state) : e_(e), transport_(transport), state_(state) {}

  void Forward(int c, int m) {
    Chunk& ch = *e_.chunks[c];
    const bool first = c == 0, last = c + 1 == e_.table.chunks();
    const Incoming in = first ? Incoming{state_.images[m], {}} : transport_.Await({PipelineOp::kForward, m, c});
    StageWork work(ch.clock[0], *e_.timer, Phase::kForward, ch.device);
    TraceMicroBatch(c, m, "F");
    torch::Tensor x = in.On(ch.device);
    if (!first) x.requires_grad_();
    AutocastGuard amp(e_.config->amp, ch.device);
    torch::Tensor y = ch.Forward(x);
    if (last) {
      y = ClassificationLoss(y, Receive(state_.labels[m], ch.device)) * state_.weights[m];
      state_.loss = state_.loss.defined() ? state_.loss + y.detach() : y.detach();
    } else {
      transport_.SendActivation(c, m, y);
    }
    ch.inputs[m] = x;
    ch.outputs[m] = y;
  }

  // The whole backward of micro-batch m on chunk c, or (`input_only`) its B.
  void Backward(int c, int m, bool input_only) {
    Chunk& ch = *e_.chunks[c];
    const bool first = c == 0, last = c + 1 == e_.table.chunks();
    const Incoming grad = last ? Incoming{} : transport_.Await({PipelineOp::kBackward, m, c});
    StageWork work(ch.clock[1], *e_.timer, Phase::kBackward, ch.device);
    TraceMicroBatch(c, m, input_only ? "B" : "backward");
    Device& dev = *e_.devices[e_.table.DeviceOf(c)];
    torch::Tensor out = last ? dev.scaler->Scale(ch.outputs[m]) : ch.outputs[m];
    torch::Tensor g = last ? torch::Tensor() : grad.On(ch.device);
    torch::Tensor input_grad;
    if (input_only) {
      auto result = BackwardInput(out, g, ch.inputs[m], ch.params);
      input_grad = result.input_grad;
      ch.weight_work[m] = std::move(result.weight);
    } else {
      out.backward(g);
      if (!first) input_grad = ch.inputs[m].grad();
    }
    if (!first) transport_.SendGradient(c, m, input_grad);
    ch.inputs[m] = ch.outputs[m] = torch::Tensor();  // the graph stays with W's work, if any
  }

  // W of micro-batch m on chunk c, or what FillWhileWaiting left of it.
  void WeightGrad(int c, int m) {
    Chunk& ch = *e_.chunks[c];
    if (ch.w_done[m]) return;
    StageWork work(ch.clock[2], *e_.timer, Phase::kBackward, ch.device);
    TraceMicroBatch(c, m, "W");
    BackwardWeight(*ch.weight_work[m]);
    ch.weight_work[m].reset();
    ch.w_done[m] = 1;
  }

  // --fill-waits: while row[i]'s input has not arrived, the first W still to
  // do in the rest of the row runs, one weight node at a time, if its B has
  // run (a later W never overtakes it, so each parameter's .grad sums the
  // micro-batches in the table's order, bit for bit the same as without
  // filling). Running a W early only frees its activations sooner.
  void FillWhileWaiting(Device& dev, const std::vector<PipelineAction>& row, size_t i) {
    while (!transport_.Arrived(row[i])) {
      const PipelineAction* next = nullptr;
      for (size_t j = i + 1; j < row.size() && next == nullptr; ++j)
        if (row[j].op == PipelineOp::kBackwardWeight && !e_.chunks[row[j].chunk]->w_done[row[j].micro_batch])
          next = &row[j];
      if (next == nullptr) return;
      Chunk& ch = *e_.chunks[next->chunk];
      const int m = next->micro_batch;
      if (!ch.weight_work[m]) return;  // its B has not run yet
      const auto t0 = Clock::now();
      {
        StageWork work(ch.clock[2], *e_.timer, Phase::kBackward, ch.device);
        TraceMicroBatch(next->chunk, m, "W");
        if (trace::Enabled()) trace::Annotate("fill", 1);  // a piece of W; "done": the piece that ends it
        if (BackwardWeightStep(*ch.weight_work[m])) {
          ch.weight_work[m].reset();
          ch.w_done[m] = 1;
          if (trace::Enabled()) trace::Annotate("done", 1);
        }
      }
      if (state_.timed) dev.fill_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
  }

 private:
  Engine& e_;
  Transport& transport_;
  StepState& state_;
};

// For each action of `row`: whether it completes its chunk's gradients of
// the step (the chunk's last whole backward or W in the row).
std::vector<char> GradientsCompleteAt(const std::vector<PipelineAction>& row) {
  std::vector<char> complete(row.size(), 0);
  std::vector<char> seen;
  for (size_t i = row.size(); i-- > 0;) {
    const PipelineAction& a = row[i];
    if (a.op == PipelineOp::kForward || a.op == PipelineOp::kBackwardInput) continue;
    if (seen.size() <= static_cast<size_t>(a.chunk)) seen.resize(a.chunk + 1, 0);
    if (!seen[a.chunk]) complete[i] = seen[a.chunk] = 1;
  }
  return complete;
}

}  // namespace

void RunDevice(Engine& e, Transport& transport, int d, StepState& state) {
  Device& dev = *e.devices[d];
  dev.optimizer->zero_grad(/*set_to_none=*/false);  // gradients stay allocated: not activations
  if (e.overlap) e.overlap->BeginStep(d);
  const int64_t base = AllocatedBytesNow(dev.device, dev.index);
  const std::vector<PipelineAction>& row = e.table.actions[d];
  const std::vector<char> gradients_complete = GradientsCompleteAt(row);
  Walk walk(e, transport, state);
  RowCursor cursor;
  for (size_t i = 0; i < row.size(); ++i) {
    const PipelineAction& a = row[i];
    transport.BeforeAction(row, i, state, cursor);
    if (e.fill_waits) walk.FillWhileWaiting(dev, row, i);
    if (a.op == PipelineOp::kForward) walk.Forward(a.chunk, a.micro_batch);
    else if (a.op == PipelineOp::kBackwardWeight) walk.WeightGrad(a.chunk, a.micro_batch);
    else walk.Backward(a.chunk, a.micro_batch, a.op == PipelineOp::kBackwardInput);
    transport.AfterAction(a, cursor);
    if (gradients_complete[i]) transport.GradientsDone(a.chunk);
    const double held = static_cast<double>(AllocatedBytesNow(dev.device, dev.index) - base);
    if (state.timed) dev.activation_peak_bytes = std::max(dev.activation_peak_bytes, held);
  }
  transport.FinishGradients();
  if (e.overlap) {
    dev.optimizer_ms = e.overlap->FinishStep(d);
    return;
  }
  {
    StageWork work(dev.clock, *e.timer, Phase::kOptimizer, dev.device);
    if (dev.scaler->enabled()) dev.found_inf = dev.scaler->Unscale(dev.params);
    else dev.optimizer->step();
  }
  WaitForCurrentStream(dev.device);
  dev.optimizer_ms = dev.clock.Take();
}

}  // namespace ddpbench::pipeline
