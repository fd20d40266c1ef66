// ddp: one rank per device on PyTorch's own DDP engine, built the way
// torch.nn.parallel.DistributedDataParallel builds it, so the figures describe
// what PyTorch DDP users get: parameters and buffers broadcast from rank 0,
// c10d::Reducer with one bucket for the first iteration and buckets rebuilt in
// backward order after it (compute_bucket_assignment_by_size with a 1 MiB
// first bucket and --bucket-cap-mb), bucketed all-reduce overlapping backward,
// buffers broadcast before every forward, no synchronisation on accumulation
// micro-steps (no_sync), and with --gradient-as-bucket-view each .grad a view
// into its bucket (torch's option). The one addition is a communication
// hook that does exactly what torch's allreduce_hook / fp16_compress_hook /
// bf16_compress_hook do and also timestamps every bucket, so the row can say
// how long all-reduce took and how much of it was hidden behind backward,
// and, with --overlap-optimizer, steps the bucket's parameters as soon as its
// all-reduce completes (on the thread that completes it), so the optimizer
// runs while backward computes the earlier layers' gradients; backward ends
// when every bucket is reduced and stepped, as the Reducer waits for the hook.
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "base/config.h"
#include "base/log.h"
#include "harness/cuda_graph.h"
#include "harness/dist.h"
#include "harness/partial_step.h"
#include "harness/phase.h"
#include "harness/shm_arena.h"
#include "harness/shm_backend.h"
#include "harness/training.h"
#include "strategies/data/data_parallel.h"
#include "strategies/registry.h"
#include "planning/zero_memory.h"

namespace ddpbench {
namespace {

using Clock = CommClock;

// torch's allreduce_hook (divide by the world, all-reduce the bucket), or its
// fp16/bf16 compress hooks (the same on a half-precision copy), timestamped;
// with a `stepper`, the bucket's parameters are stepped with its reduced
// gradients once the all-reduce is done. With `average` (a world on shared
// memory) an uncompressed bucket is all-reduced with ReduceOp::AVG, which
// divides inside the sum's own pass instead of in a pass of its own here.
class TimedAllReduceHook final
    : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  TimedAllReduceHook(c10::intrusive_ptr<c10d::ProcessGroup> group, std::optional<at::ScalarType> wire,
                     std::shared_ptr<CommTimeline> timeline, std::shared_ptr<PartialStepper> stepper, bool average)
      : CppCommHookInterface(std::move(group)), wire_(wire), timeline_(std::move(timeline)),
        stepper_(std::move(stepper)), average_(average && !wire) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    // Marks the launch of this bucket's all-reduce in Nsight (the transfer
    // itself is asynchronous: NCCL's kernel or Gloo's thread).
    NvtxRange range("communication");
    const auto start = Clock::now();
    at::Tensor buffer = bucket.getBufferRef();
    const int device = buffer.device().index();
    // No timing inside a CUDA graph capture (no timeline): its events would
    // be recorded once, at capture, and never again on replay.
    auto cuda_start = timeline_ ? CommTimeline::CudaStart(buffer.is_cuda(), device) : nullptr;
    at::Tensor sent = wire_ ? buffer.to(*wire_) : buffer;
    c10d::AllreduceOptions options;
    if (average_) options.reduceOp = c10d::ReduceOp::AVG;
    else sent.div_(state_->getSize());
    std::vector<at::Tensor> tensors{sent};
    auto future = state_->allreduce(tensors, options)->getFuture();
    auto timeline = timeline_;
    const bool copy_back = wire_.has_value();
    const int64_t index = static_cast<int64_t>(bucket.getIndex());
    auto stepper = stepper_;
    std::vector<at::Tensor> params, grads;  // grads: views into `buffer`
    if (stepper) {
      params = bucket.getParameters();
      grads = bucket.getGradients();
    }
    return future->then(
        [buffer, copy_back, timeline, start, cuda_start, device, index, stepper, params, grads](
            c10::ivalue::Future& done) {
          at::Tensor reduced = done.value().toTensorVector()[0];
          if (copy_back) buffer.copy_(reduced);
          if (timeline) timeline->End(start, cuda_start, device, "all-reduce", index);
          if (stepper) stepper->Step(params, grads);
          return c10::IValue(buffer);
        },
        c10::TensorType::get());
  }

 private:
  std::optional<at::ScalarType> wire_;
  std::shared_ptr<CommTimeline> timeline_;
  std::shared_ptr<PartialStepper> stepper_;
  bool average_;
};

class DdpStrategy final : public Strategy {
 public:
  static constexpr int64_t kEagerSteps = 11;  // before --cuda-graphs captures (torch's DDP recipe)

  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    dist_ = ctx.dist;
    device_ = ctx.devices.front();
    TORCH_CHECK(dist_->group, "ddp needs a process group");
    model_ = BuildModel(ctx.model, config_->seed, device_);
    for (auto& p : model_->parameters())
      if (p.requires_grad()) params_.push_back(p);
    buffers_ = model_->buffers();

    // DDP's _sync_module_states: rank 0's parameters and buffers everywhere.
    std::vector<at::Tensor> states = params_;
    states.insert(states.end(), buffers_.begin(), buffers_.end());
    dist_->BroadcastFromRoot(states, "DDP broadcast of the initial parameters and buffers");

    // As DDP with find_unused_parameters=False: a single bucket for the first
    // iteration, rebuilt from the real gradient order after it.
    std::vector<bool> sparse(params_.size(), false);
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
        params_, {std::numeric_limits<size_t>::max()}, sparse);
    std::reverse(buckets.begin(), buckets.end());
    std::unordered_map<size_t, std::string> names;
    auto named = model_->named_parameters();
    for (size_t i = 0, j = 0; i < named.size(); ++i)
      if (named[i].value().requires_grad()) names[j++] = named[i].key();
    const int64_t cap = static_cast<int64_t>(config_->bucket_cap_mb * 1024 * 1024);
    // --cuda-graphs: torch's recipe for capturing DDP: the Reducer made on
    // the capture stream, and eleven eager steps before the capture (the
    // Reducer rebuilds its buckets after the first and samples its runtime
    // statistics, with host syncs, in its first ten).
    if (config_->cuda_graphs) {
      graph_ = std::make_unique<WholeStepGraph>(device_, kEagerSteps);
      if (config_->warmup <= kEagerSteps)
        LogWarn("--cuda-graphs: ddp runs {} eager steps and captures the next; with --warmup={} the timed steps "
                "include {}", kEagerSteps, config_->warmup, config_->warmup < kEagerSteps ? "eager steps and the capture" : "the capture");
    }
    // --cpu-backend=shm|auto: the Reducer's gradient buckets live in this
    // rank's shared-memory arena, so their all-reduces read each other in
    // place. Room for two full sets: the first step's one bucket and the
    // rebuilt buckets may be held at once.
    int64_t grad_bytes = 0;
    for (const auto& p : params_) grad_bytes += static_cast<int64_t>(p.nbytes());
    arena_ = AttachShmArenas(dist_->shm_world, 2 * grad_bytes + (1 << 20));
    auto make_reducer = [&] {
      ShmArenaScope in_arena(arena_.get());
      reducer_ = std::make_shared<c10d::Reducer>(params_, buckets, dist_->group, sparse, cap,
                                                 /*find_unused_parameters=*/false,
                                                 config_->gradient_as_bucket_view, names,
                                                 config_->bucket_cap_mb == 25.0 ? kFirstBucketBytes : cap,
                                                 /*skip_all_reduce_unused_params=*/false,
                                                 /*use_python_reducer=*/false, std::vector<int64_t>{});
    };
    if (graph_) graph_->OnCaptureStream(make_reducer);
    else make_reducer();
    logger_ = std::make_shared<c10d::Logger>(reducer_);
    reducer_->set_logger(logger_);
    timeline_ = std::make_shared<CommTimeline>();
    timeline_->ends_are_real = !device_.is_cuda();
    std::optional<at::ScalarType> wire;
    if (config_->compression == "fp16") wire = at::kHalf;
    if (config_->compression == "bf16") wire = at::kBFloat16;
    optimizer_ = MakeOptimizer(*config_, model_->parameters(), ctx.lr);
    scaler_ = std::make_unique<LossScaler>(config_->amp, device_);
    // --overlap-optimizer: the CLI refuses it where the step is not per
    // bucket (fp16's loss scaler, CUDA graphs).
    if (config_->overlap_optimizer) stepper_ = std::make_shared<PartialStepper>(*optimizer_);
    reducer_->register_comm_hook(std::make_unique<TimedAllReduceHook>(
        dist_->group, wire, config_->cuda_graphs ? nullptr : timeline_, stepper_, dist_->shm_world != nullptr));
  }

  StepResult Step(const Batch& batch) override {
    model_->train();
    // Replayed steps are one graph launch, collectives included: phases and
    // communication are not timed apart (the row leaves them empty).
    return {RunTrainStep(graph_.get(), device_, batch.images, batch.labels,
                         [this](const torch::Tensor& images, const torch::Tensor& labels, bool timed) {
                           return Train(images, labels, timed);
                         })};
  }

  // One step on device tensors; `timed` brackets the phases with the timer's
  // CUDA events and times the buckets' all-reduces, neither of which a graph
  // capture can hold.
  torch::Tensor Train(const torch::Tensor& batch_images, const torch::Tensor& batch_labels, bool timed) {
    auto phase = [&](Phase p) { return timer_->MeasureIf(timed, p); };
    // --gradient-as-bucket-view: the gradients are views into the buckets,
    // which the optimizer's zero_grad cannot detach in place; dropped
    // instead, autograd's fresh gradient is copied into the bucket and the
    // Reducer points .grad back at it.
    if (config_->gradient_as_bucket_view) {
      for (auto& p : params_) p.mutable_grad().reset();
    } else {
      optimizer_->zero_grad();
    }
    const int64_t micro = config_->grad_accum;
    auto images = batch_images.chunk(micro);
    auto labels = batch_labels.chunk(micro);
    torch::Tensor total_loss = torch::zeros({}, torch::TensorOptions().device(device_));
    double comm_ms = 0, hidden_ms = 0;
    for (int64_t m = 0; m < micro; ++m) {
      const bool sync = m == micro - 1;  // no_sync() on every micro-step but the last
      torch::Tensor loss;
      {
        auto scope = phase(Phase::kForward);
        if (sync) reducer_->prepare_for_forward();
        {
          CollectiveLabel label("DDP bucket rebuild");
          ShmArenaScope in_arena(arena_.get());
          reducer_->rebuild_buckets();
        }
        if (sync) dist_->BroadcastFromRoot(buffers_, "DDP buffer broadcast");
        AutocastGuard amp(config_->amp, device_);
        auto logits = model_->forward(images[m]);
        loss = ClassificationLoss(logits, labels[m]);
        if (sync) reducer_->prepare_for_backward({});
      }
      {
        auto scope = phase(Phase::kBackward);
        CollectiveLabel label("DDP gradient all-reduce");
        timeline_->intervals.clear();
        timeline_->marks.clear();
        scaler_->Scale(loss / static_cast<double>(micro)).backward();
        if (sync && timed && device_.is_cuda()) {
          DeferCudaBackwardComm(*timeline_, *timer_, overlap_);
        } else if (sync && timed) {
          auto [total, before] = timeline_->BackwardMs();
          comm_ms += total;
          hidden_ms += before;
        }
      }
      total_loss += loss.detach();
    }
    if (timed && !device_.is_cuda()) {
      if (comm_ms > 0) timer_->Add(Phase::kCommunication, comm_ms);
      overlap_.Add(comm_ms, hidden_ms);
    }
    {
      auto scope = phase(Phase::kOptimizer);
      if (stepper_) {
        // Every bucket was stepped as its all-reduce completed, in backward.
      } else if (scaler_->enabled()) {
        // Gradients are identical on every rank after the all-reduce, so
        // every rank takes the same skip-or-step decision.
        scaler_->StepAndUpdate(*optimizer_, scaler_->Unscale(params_));
      } else {
        optimizer_->step();
      }
    }
    return total_loss / static_cast<double>(micro);
  }

  torch::Tensor Predict(const torch::Tensor& images) override {
    return PredictLogits(model_, config_->amp, device_, images);
  }

  std::vector<torch::Tensor> Parameters() override { return model_->parameters(); }
  double OptimizerStateMb() override { return ddpbench::OptimizerStateMb(*optimizer_); }

  // The model, optimizer and scaler, and the Reducer's bucket layout: after
  // the first step it is the rebuilt one, and a resumed run starts with it so
  // that its first step reduces the same buckets as the uninterrupted run.
  TensorMap SaveState() override {
    TensorMap state = SaveTrainingState(*model_, *optimizer_, *scaler_);
    auto [order, sizes] = BucketLayout();
    state["ddp.bucket_params"] = torch::tensor(order, torch::kLong);
    state["ddp.bucket_sizes"] = torch::tensor(sizes, torch::kLong);
    return state;
  }

  void LoadState(const TensorMap& state) override {
    StateReader reader(state);
    LoadTrainingState(reader, *model_, *optimizer_, *scaler_);
    const auto order = reader.TakeAnyShape("ddp.bucket_params", torch::kLong).contiguous();
    const auto sizes = reader.TakeAnyShape("ddp.bucket_sizes", torch::kLong).contiguous();
    reader.Finish();
    const int64_t n = static_cast<int64_t>(params_.size());
    std::vector<int64_t> seen(n, 0);
    for (int64_t i = 0; i < order.numel(); ++i) {
      const int64_t p = order[i].item<int64_t>();
      if (p < 0 || p >= n || seen[p]++) throw std::runtime_error(fmt::format(
          "training state: key 'ddp.bucket_params' is not an order of this model's {} parameters", n));
    }
    if (order.numel() != n || sizes.dim() != 1 || (sizes < 1).any().item<bool>() || sizes.sum().item<int64_t>() != n)
      throw std::runtime_error(fmt::format(
          "training state: key 'ddp.bucket_sizes' does not cut this model's {} parameters into buckets", n));
    std::vector<std::vector<size_t>> buckets;
    for (int64_t b = 0, i = 0; b < sizes.numel(); ++b) {
      buckets.emplace_back();
      for (int64_t k = 0; k < sizes[b].item<int64_t>(); ++k) buckets.back().push_back(order[i++].item<int64_t>());
    }
    ShmArenaScope in_arena(arena_.get());  // as at set-up: the buckets in this rank's arena
    reducer_->initialize_buckets(std::move(buckets));
  }

  std::map<std::string, std::string> Extras() override {
    std::map<std::string, std::string> extras = {
        {"bucket_cap_mb", fmt::format("{}", config_->bucket_cap_mb)},
        {"grad_accum", std::to_string(config_->grad_accum)},
        {"compression", config_->compression}};
    // Over the timed steps only (the first `warmup` steps are warm-up); on
    // CUDA read from the events of each bucket's all-reduce.
    const double hidden = overlap_.HiddenFraction(static_cast<size_t>(config_->warmup));
    if (hidden >= 0) extras["allreduce_hidden_frac"] = fmt::format("{:.3f}", hidden);
    auto memory = ModelStateMemory();
    extras.insert(memory.begin(), memory.end());
    return extras;
  }

 private:
  // The Reducer's buckets: the parameter indices in bucket order, and how
  // many each bucket holds.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> BucketLayout() {
    std::unordered_map<const void*, int64_t> index;
    for (size_t i = 0; i < params_.size(); ++i) index[params_[i].unsafeGetTensorImpl()] = static_cast<int64_t>(i);
    std::vector<int64_t> order, sizes;
    for (auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/true)) {
      const auto params = bucket.getParameters();
      for (const auto& p : params) order.push_back(index.at(p.unsafeGetTensorImpl()));
      sizes.push_back(static_cast<int64_t>(params.size()));
    }
    return {order, sizes};
  }

  // What this rank holds between steps: the parameters; the gradients
  // (the Reducer's bucket buffers, and each .grad that is not a view into
  // them: another full copy unless --gradient-as-bucket-view); the formula's
  // stage 0 beside it.
  std::map<std::string, std::string> ModelStateMemory() {
    auto bytes = [](const at::Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; };
    double param_bytes = 0, grad_bytes = 0;
    int64_t count = 0;
    std::vector<at::Tensor> buffers;
    for (auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/false)) {
      buffers.push_back(bucket.getBufferRef());
      grad_bytes += bytes(buffers.back());
    }
    for (const auto& p : params_) {
      param_bytes += bytes(p);
      const at::Tensor& grad = p.grad();
      if (grad.defined() &&
          std::none_of(buffers.begin(), buffers.end(), [&](const at::Tensor& b) { return grad.is_alias_of(b); }))
        grad_bytes += bytes(grad);
      count += p.numel();
    }
    return ModelStateColumns(param_bytes, grad_bytes, /*stage=*/0, count, dist_->world,
                             BytesPerParameter(config_->optimizer, config_->momentum, params_.front().element_size()));
  }

  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  DistContext* dist_ = nullptr;
  torch::Device device_ = torch::kCPU;
  ResNet model_{nullptr};
  std::vector<torch::Tensor> params_, buffers_;
  std::shared_ptr<ShmArena> arena_;  // before reducer_: its buckets may live here
  std::shared_ptr<c10d::Reducer> reducer_;
  std::shared_ptr<c10d::Logger> logger_;
  std::shared_ptr<CommTimeline> timeline_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  std::shared_ptr<PartialStepper> stepper_;  // --overlap-optimizer
  OverlapStats overlap_;
  std::unique_ptr<WholeStepGraph> graph_;
};

}  // namespace

static std::unique_ptr<Strategy> MakeDdpStrategy() { return std::make_unique<DdpStrategy>(); }
DDPBENCH_REGISTER_STRATEGY("ddp", MakeDdpStrategy);

}  // namespace ddpbench
