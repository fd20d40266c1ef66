// See cuda_graph.h. The capture follows torch.cuda.graph's recipe: eager
// warm-up and capture on a side stream joined to the current one by events,
// the autocast weight cache off while capturing (a cached cast made outside
// the graph would be missing from it), static input tensors that each replay
// refills, and the loss cloned out of the graph's static output.
#include "harness/cuda_graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <stdexcept>

#ifdef DDPBENCH_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddpbench {

torch::Tensor RunTrainStep(WholeStepGraph* graph, torch::Device device, const torch::Tensor& images,
                           const torch::Tensor& labels, const TrainStepFn& train) {
  if (graph == nullptr) return train(images.to(device), labels.to(device), /*timed=*/true);
  return graph->Run(images, labels, [&train](const torch::Tensor& i, const torch::Tensor& l) {
    return train(i, l, /*timed=*/false);
  });
}

#ifdef DDPBENCH_WITH_CUDA
namespace {

// Work enqueued on `side` inside this scope runs after everything already on
// the current stream, and the current stream waits for it at the end.
class SideStreamScope {
 public:
  SideStreamScope(c10::cuda::CUDAStream main, c10::cuda::CUDAStream side) : main_(main), side_(side) {
    at::cuda::CUDAEvent ready;
    ready.record(main_);
    ready.block(side_);
    guard_.emplace(side_);
  }
  ~SideStreamScope() {
    guard_.reset();
    at::cuda::CUDAEvent done;
    done.record(side_);
    done.block(main_);
  }

 private:
  c10::cuda::CUDAStream main_, side_;
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
};

}  // namespace

struct WholeStepGraph::Impl {
  torch::Device device;
  int64_t eager_left;
  c10::cuda::CUDAStream side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor images, labels, loss;  // the graph's static input and output

  Impl(torch::Device d, int64_t eager)
      : device(d), eager_left(eager), side(c10::cuda::getStreamFromPool(false, d.index())) {}

  void Capture(const torch::Tensor& in_images, const torch::Tensor& in_labels, const StepFn& step) {
    images = in_images.to(device).clone();
    labels = in_labels.to(device).clone();
    SideStreamScope scope(c10::cuda::getCurrentCUDAStream(device.index()), side);
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->capture_begin();
    try {
      loss = step(images, labels);
    } catch (...) {
      try {
        graph->capture_end();
      } catch (...) {
      }
      graph.reset();
      at::autocast::set_autocast_cache_enabled(cache);
      throw;
    }
    graph->capture_end();
    at::autocast::set_autocast_cache_enabled(cache);
  }
};

WholeStepGraph::WholeStepGraph(torch::Device device, int64_t eager_steps)
    : impl_(std::make_unique<Impl>(device, eager_steps)) {
  if (!device.is_cuda()) throw std::invalid_argument("--cuda-graphs: the device must be CUDA");
}
WholeStepGraph::~WholeStepGraph() = default;

void WholeStepGraph::OnCaptureStream(const std::function<void()>& fn) {
  c10::cuda::CUDAGuard device_guard(impl_->device);
  SideStreamScope scope(c10::cuda::getCurrentCUDAStream(impl_->device.index()), impl_->side);
  fn();
}

torch::Tensor WholeStepGraph::Run(const torch::Tensor& images, const torch::Tensor& labels, const StepFn& step) {
  Impl& s = *impl_;
  c10::cuda::CUDAGuard device_guard(s.device);
  if (!s.graph && s.eager_left > 0) {
    --s.eager_left;
    SideStreamScope scope(c10::cuda::getCurrentCUDAStream(s.device.index()), s.side);
    return step(images.to(s.device), labels.to(s.device));
  }
  if (!s.graph) s.Capture(images, labels, step);
  if (images.sizes() != s.images.sizes() || labels.sizes() != s.labels.sizes())
    throw std::runtime_error(fmt::format(
        "--cuda-graphs: the step was captured for images {} but this batch is {}; a graph replays one "
        "fixed shape (a short last batch does this: use a batch size that divides the data, or leave the "
        "flag out)",
        fmt::join(s.images.sizes(), "x"), fmt::join(images.sizes(), "x")));
  s.images.copy_(images, /*non_blocking=*/true);
  s.labels.copy_(labels, /*non_blocking=*/true);
  s.graph->replay();
  return s.loss.clone();
}

#else

struct WholeStepGraph::Impl {};
WholeStepGraph::WholeStepGraph(torch::Device, int64_t) {
  throw std::runtime_error("--cuda-graphs: this ddpbench was built with a LibTorch without CUDA");
}
WholeStepGraph::~WholeStepGraph() = default;
void WholeStepGraph::OnCaptureStream(const std::function<void()>& fn) { fn(); }
torch::Tensor WholeStepGraph::Run(const torch::Tensor&, const torch::Tensor&, const StepFn&) { return {}; }

#endif

}  // namespace ddpbench
