// The hand-offs between model chunks: in one process through mailboxes
// (Transport itself), with --stage-ranks between ranks (RankTransport).
#include "strategies/pipeline/transport.h"

#include <torch/torch.h>

#include <algorithm>

#include "base/config.h"
#include "harness/dist.h"
#include "harness/training.h"
#include "strategies/pipeline/replicas.h"
#include "strategies/pipeline/stage_link.h"

namespace ddpbench::pipeline {

Incoming Transport::Await(const PipelineAction& a) {
  Chunk& ch = *e_.chunks[a.chunk];
  return {a.op == PipelineOp::kForward ? ch.from_prev.Pop(a.micro_batch) : ch.from_next.Pop(a.micro_batch), {}};
}

bool Transport::Arrived(const PipelineAction& a) {
  Chunk& ch = *e_.chunks[a.chunk];
  if (a.op == PipelineOp::kForward) return a.chunk == 0 || ch.from_prev.Has(a.micro_batch);
  if (a.op == PipelineOp::kBackwardWeight) return true;
  return a.chunk + 1 == e_.table.chunks() || ch.from_next.Has(a.micro_batch);
}

void Transport::SendActivation(int c, int m, const torch::Tensor& y) {
  e_.chunks[c + 1]->from_prev.Push(m, Send(y.detach()));
}

void Transport::SendGradient(int c, int m, const torch::Tensor& g) { e_.chunks[c - 1]->from_next.Push(m, Send(g)); }

torch::Tensor Transport::Predict(const torch::Tensor& images) {
  Handoff h = Send(images, /*host=*/true);
  for (size_t c = 0; c < e_.chunks.size(); ++c) {
    e_.workers->Run(e_.table.DeviceOf(static_cast<int>(c)), [&] {
      Chunk& ch = *e_.chunks[c];
      torch::NoGradGuard no_grad;
      ch.Train(false);
      torch::Tensor y;
      {
        AutocastGuard amp(e_.config->amp, ch.device);
        y = ch.Forward(Receive(h, ch.device));
      }
      ch.Train(true);
      h = Send(y);
    });
  }
  return Receive(h, e_.chunks.back()->device);
}

namespace {

// Receives each rank posts ahead of the action that needs them, and the
// tags of evaluation hand-offs and of the step's loss (the step's own are
// below them: ActTag, GradTag).
constexpr int kPostAhead = 2;
constexpr int kEvalTag = 1 << 24;
constexpr int kLossTag = 1 << 25;

// --stage-ranks: device d is rank d. A hand-off between chunks on two ranks
// is a message tagged by chunk and micro-batch; between chunks of one rank
// (interleaved schedules) it stays in-process.
class RankTransport final : public Transport {
 public:
  explicit RankTransport(Engine& engine)
      : Transport(engine), link_(PipelineGroup(*engine.dist)),
        boundaries_(MeasureBoundaries(engine.model, RunImageSize(*engine.config), engine.config->amp,
                                      engine.chunks.front()->device)) {
    const DistContext& dist = *engine.dist;
    if (dist.replicate_group && dist.mesh.replicas > 1)
      replicas_ = std::make_unique<ReplicaGradients>(*dist.replicate_group, dist.mesh.replicas, *engine.timer);
  }

  bool AcrossRanks() const override { return true; }

  void BeginStep() override {
    if (!e_.Local(LastDevice()))  // the step's loss, from the last stage's rank
      link_.Post(LastDevice(), kLossTag, {}, torch::TensorOptions().dtype(torch::kDouble).device(e_.dist->device));
  }

  // The step's loss on every rank: the last stage's rank sends it, the
  // others take the receive BeginStep posted.
  void ShareLoss(StepState& state) override {
    if (!e_.Local(LastDevice())) {
      state.loss = link_.Take(kLossTag);
      return;
    }
    const torch::Tensor loss = state.loss.to(e_.dist->device, torch::kDouble);
    for (int r = 0; r < e_.table.devices; ++r)
      if (r != e_.rank) link_.Send(loss, r, kLossTag);
  }

  void EndStep() override { link_.Flush(); }

  void BeforeAction(const std::vector<PipelineAction>& row, size_t i, const StepState& state,
                    RowCursor& cursor) override {
    for (; cursor.ahead < row.size() && (cursor.ahead <= i || cursor.posted < kPostAhead); ++cursor.ahead)
      if (PostInput(row[cursor.ahead], state)) ++cursor.posted;
  }
  void AfterAction(const PipelineAction& a, RowCursor& cursor) override {
    if (RemoteInput(a)) --cursor.posted;
  }

  Incoming Await(const PipelineAction& a) override {
    if (!RemoteInput(a)) return Transport::Await(a);
    return {{}, TakeRemote(InputTag(a))};
  }
  bool Arrived(const PipelineAction& a) override {
    return RemoteInput(a) ? link_.Arrived(InputTag(a)) : Transport::Arrived(a);
  }
  void SendActivation(int c, int m, const torch::Tensor& y) override {
    const int to = e_.table.DeviceOf(c + 1);
    if (e_.Local(to)) Transport::SendActivation(c, m, y);
    else link_.Send(y.detach(), to, ActTag(c + 1, m));
  }
  void SendGradient(int c, int m, const torch::Tensor& g) override {
    const int to = e_.table.DeviceOf(c - 1);
    if (e_.Local(to)) Transport::SendGradient(c, m, g);
    else link_.Send(g, to, GradTag(c, m));
  }

  void GradientsDone(int c) override {
    if (replicas_) replicas_->Launch(c, e_.chunks[c]->params, e_.chunks[c]->device);
  }
  void FinishGradients() override {
    if (replicas_) replicas_->Finish();
  }

  torch::Tensor Predict(const torch::Tensor& images) override;
  void GatherParameters() override { GatherUnitParameters(*e_.dist, e_.model, e_.unit_device, e_.table.devices); }
  void GatherBuffers() override { GatherUnitBuffers(*e_.dist, e_.model, e_.unit_device, e_.table.devices); }
  void ShareFigures() override;

 private:
  int LastDevice() const { return e_.table.DeviceOf(e_.table.chunks() - 1); }

  // The tags of a step's hand-offs: chunk c's input activation of
  // micro-batch m, and the gradient chunk c sends back for that input.
  int ActTag(int c, int m) const { return 2 * (c * e_.table.micro_batches + m); }
  int GradTag(int c, int m) const { return ActTag(c, m) + 1; }

  // Whether action a's input comes from another rank.
  bool RemoteInput(const PipelineAction& a) const {
    if (a.op == PipelineOp::kBackwardWeight) return false;
    if (a.op == PipelineOp::kForward) return a.chunk > 0 && !e_.Local(e_.table.DeviceOf(a.chunk - 1));
    return a.chunk + 1 < e_.table.chunks() && !e_.Local(e_.table.DeviceOf(a.chunk + 1));
  }
  // The tag of a forward's or a backward's input: the activation entering its
  // chunk, or the gradient the chunk after sends back.
  int InputTag(const PipelineAction& a) const {
    return a.op == PipelineOp::kForward ? ActTag(a.chunk, a.micro_batch) : GradTag(a.chunk + 1, a.micro_batch);
  }

  // Posts the receive of what enters chunk c (an activation, or the gradient
  // of chunk c - 1's output when c is the sender of one) for `rows` images,
  // its shape and dtype those MeasureBoundaries found.
  void PostBoundary(int src, int tag, int c, int64_t rows, torch::Device device) {
    int first = 0;
    for (int k = 0; k < c; ++k) first += e_.plan.counts[k];
    std::vector<int64_t> shape{rows};
    const auto& tail = boundaries_.shape.at(first - 1);
    shape.insert(shape.end(), tail.begin(), tail.end());
    link_.Post(src, tag, shape, torch::TensorOptions().dtype(boundaries_.dtype.at(first - 1)).device(device));
  }

  // Posts the receive of action a's input when another rank sends it.
  bool PostInput(const PipelineAction& a, const StepState& state) {
    if (!RemoteInput(a)) return false;
    const int c = a.chunk, from = a.op == PipelineOp::kForward ? c - 1 : c + 1;
    // The gradient of chunk c's output has the shape of what enters chunk c + 1.
    PostBoundary(e_.table.DeviceOf(from), InputTag(a), std::max(c, from), state.rows[a.micro_batch],
                 e_.chunks[c]->device);
    return true;
  }

  torch::Tensor TakeRemote(int tag) {
    torch::Tensor t = link_.Take(tag);
    if (e_.model->options().channels_last && t.dim() == 4) t = t.contiguous(at::MemoryFormat::ChannelsLast);
    return t;
  }

  // The process group of this rank's pipeline: its group of the mesh, or the world.
  static c10d::ProcessGroup& PipelineGroup(const DistContext& dist) {
    TORCH_CHECK(dist.group, "--stage-ranks: the ranks have no process group");
    return *dist.strategy_group();
  }

  RankLink link_;
  std::unique_ptr<ReplicaGradients> replicas_;  // --replicate-degree: the replicate all-reduce
  Boundaries boundaries_;        // what each unit hands on, for one image
  bool figures_shared_ = false;  // ShareFigures ran
};

// Each rank runs its chunks on the batch in turn, taking the input from the
// rank before; the logits are the last stage's rank's, an undefined tensor
// elsewhere (Evaluate counts them once).
torch::Tensor RankTransport::Predict(const torch::Tensor& images) {
  const int64_t n = images.size(0);
  torch::Tensor logits;
  e_.workers->Run(0, [&] {
    torch::NoGradGuard no_grad;
    torch::Tensor y;  // the chunk before's output, when it ran here
    for (int c = 0; c < e_.table.chunks(); ++c) {
      if (!e_.Local(e_.table.DeviceOf(c))) {
        y = torch::Tensor();
        continue;
      }
      Chunk& ch = *e_.chunks[c];
      torch::Tensor x = y;
      if (c == 0) {
        x = images.to(ch.device);
      } else if (!x.defined()) {
        PostBoundary(e_.table.DeviceOf(c - 1), kEvalTag + c, c, n, ch.device);
        x = TakeRemote(kEvalTag + c);
      }
      ch.Train(false);
      {
        AutocastGuard amp(e_.config->amp, ch.device);
        y = ch.Forward(x);
      }
      ch.Train(true);
      if (c + 1 == e_.table.chunks()) logits = y;
      else if (!e_.Local(e_.table.DeviceOf(c + 1))) link_.Send(y, e_.table.DeviceOf(c + 1), kEvalTag + c + 1);
    }
    link_.Flush();
  });
  return logits;
}

// Every device's and chunk's figures onto every rank (each rank measured its
// own; the others' are zero here), the wall time the slowest rank's.
// Collective, once.
void RankTransport::ShareFigures() {
  if (figures_shared_) return;
  figures_shared_ = true;
  const size_t steps = e_.Mine().step_busy_ms.size();
  std::vector<double> mine;
  for (auto& dev : e_.devices) {
    dev->step_busy_ms.resize(steps, 0.0);
    mine.insert(mine.end(), {dev->busy_ms, dev->activation_peak_bytes, dev->fill_ms});
    mine.insert(mine.end(), dev->step_busy_ms.begin(), dev->step_busy_ms.end());
  }
  for (auto& ch : e_.chunks) mine.insert(mine.end(), ch->op_ms, ch->op_ms + 3);
  mine.push_back(e_.wall_ms);
  const std::vector<double> all = e_.dist->AllGather(mine);
  const size_t n = mine.size();
  std::vector<double> sum(n, 0.0);
  for (size_t r = 0; (r + 1) * n <= all.size(); ++r)
    for (size_t i = 0; i < n; ++i) sum[i] = i + 1 == n ? std::max(sum[i], all[r * n + i]) : sum[i] + all[r * n + i];
  // Replicated pipelines: each device's and chunk's figures summed over the
  // replicas, made their mean.
  const double replicas = e_.dist->mesh.replicas;
  for (size_t i = 0; i + 1 < n; ++i) sum[i] /= replicas;
  auto v = sum.begin();
  for (auto& dev : e_.devices) {
    dev->busy_ms = *v++, dev->activation_peak_bytes = *v++, dev->fill_ms = *v++;
    dev->step_busy_ms.assign(v, v + steps);
    v += steps;
  }
  for (auto& ch : e_.chunks)
    for (int k = 0; k < 3; ++k) ch->op_ms[k] = *v++;
  e_.wall_ms = *v;
}

}  // namespace

std::unique_ptr<Transport> MakeTransport(Engine& engine) {
  if (engine.ranks && engine.table.devices > 1) return std::make_unique<RankTransport>(engine);
  return std::make_unique<Transport>(engine);
}

}  // namespace ddpbench::pipeline
