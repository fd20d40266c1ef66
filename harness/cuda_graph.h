// --cuda-graphs: a whole training step (forward, backward, optimizer) captured
// once as a CUDA graph and replayed every step after, so that the CPU launches
// one graph instead of hundreds of kernels. Kept apart from the strategies so
// that only this file's .cpp includes the CUDA graph headers.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace ddpbench {

// One step of a strategy that can be captured: `train` on the batch, with
// `timed` saying whether it may time its phases. Without a graph it runs
// eagerly on the batch moved to `device`, timed; with one, through
// graph->Run (eager steps, the capture, then replays), untimed.
using TrainStepFn = std::function<torch::Tensor(const torch::Tensor& images, const torch::Tensor& labels, bool timed)>;
class WholeStepGraph;
torch::Tensor RunTrainStep(WholeStepGraph* graph, torch::Device device, const torch::Tensor& images,
                           const torch::Tensor& labels, const TrainStepFn& train);

class WholeStepGraph {
 public:
  // The step: images and labels on the device in, the detached loss out.
  // It must not synchronise with the host (no .item(), no host-side decision
  // on device values) and must not time itself with CUDA events.
  using StepFn = std::function<torch::Tensor(const torch::Tensor& images, const torch::Tensor& labels)>;

  // The first `eager_steps` calls run the step eagerly on the capture stream
  // (cuDNN autotuning, optimizer state and per-stream handles are created
  // there); the next call captures it and every call replays it.
  WholeStepGraph(torch::Device device, int64_t eager_steps);
  ~WholeStepGraph();
  WholeStepGraph(const WholeStepGraph&) = delete;
  WholeStepGraph& operator=(const WholeStepGraph&) = delete;

  // Runs `fn` with the capture stream current. Autograd nodes made there
  // (such as the gradient accumulators a DDP Reducer holds from its
  // construction on) remember that stream, and backward makes the stream a
  // node remembers wait for the stream that feeds it: made on the default
  // stream, they would make it wait on the capture, which CUDA refuses.
  void OnCaptureStream(const std::function<void()>& fn);

  // One step on this batch (any device; copied into the graph's inputs).
  // Throws if the batch's shape differs from the captured one.
  torch::Tensor Run(const torch::Tensor& images, const torch::Tensor& labels, const StepFn& step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddpbench
