// The pipelines' overlapped optimizer (overlap_step.h): a hook per parameter
// counts the step's accumulated gradients and, at the last micro-batch's,
// queues the parameter; workers whose rows are done step the queue.
#include "strategies/pipeline/overlap_step.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "base/log.h"
#include "harness/memory.h"
#include "harness/partial_step.h"
#include "strategies/pipeline/engine.h"

namespace ddpbench::pipeline {

// One parameter's count of this step's gradients; `active` from the owner's
// BeginStep until the parameter is queued.
struct Slot {
  int device = -1;
  int expected = 0;
  int count = 0;
  std::atomic<bool> active{false};
};

struct OptimizerOverlap::State {
  explicit State(Engine& engine) : e(engine), ready(engine.devices.size()), ms(engine.devices.size(), 0),
                                   steppers(engine.devices.size()), stepping(engine.devices.size(), nullptr) {}

  // From a parameter's hook, on the thread running its backward.
  void Accumulated(Slot& slot, const torch::Tensor& param) {
    if (!slot.active.load() || ++slot.count < slot.expected) return;
    slot.active = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ready[slot.device].push_back(param);
      ++queued;
    }
    changed.notify_all();
  }

  // Steps `params` of device d on the calling worker, charged to d.
  void StepOn(int d, const std::vector<torch::Tensor>& params) {
    if (params.empty()) return;
    Device& dev = *e.devices[d];
    const auto t0 = Clock::now();
    {
      CpuDeviceScope charge(dev.index);
      auto scope = e.timer->Measure(Phase::kOptimizer, dev.device);
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad());
      steppers[d]->Step(params, grads);
    }
    const double spent = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(mutex);
    ms[d] += spent;
  }

  // A device with queued parameters, or -1.
  int Queued() const {
    for (size_t d = 0; d < ready.size(); ++d)
      if (!ready[d].empty()) return static_cast<int>(d);
    return -1;
  }

  Engine& e;
  std::mutex mutex;
  std::condition_variable changed;
  std::unordered_map<const c10::TensorImpl*, std::shared_ptr<Slot>> slots;
  std::vector<torch::Tensor> hooked;
  std::vector<std::vector<torch::Tensor>> ready;  // per device: final, not yet stepped
  std::vector<double> ms;                         // per device: this step's stepping
  std::vector<std::unique_ptr<PartialStepper>> steppers;
  std::vector<const torch::optim::Optimizer*> stepping;  // what each stepper steps
  int64_t queued = 0, left = 0;  // parameter steps from the hooks, and from FinishStep's leftovers
  int rows_left = 0;  // local devices still in their row
  int running = 0;    // workers stepping now
  bool aborted = false;
};

namespace {

class CountHook : public torch::autograd::PostAccumulateGradHook {
 public:
  CountHook(OptimizerOverlap::State* state, std::shared_ptr<Slot> slot) : state_(state), slot_(std::move(slot)) {}
  void operator()(const torch::autograd::Variable& param) override { state_->Accumulated(*slot_, param); }

 private:
  OptimizerOverlap::State* state_;
  std::shared_ptr<Slot> slot_;
};

}  // namespace

OptimizerOverlap::OptimizerOverlap(Engine& e) : s_(std::make_unique<State>(e)) {
  for (const auto& dev : e.devices)
    TORCH_CHECK(dev->device.is_cpu(), "--overlap-optimizer: the pipelines overlap their steps on CPU devices only");
}

OptimizerOverlap::~OptimizerOverlap() {
  for (const auto& p : s_->hooked) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  if (s_->queued + s_->left > 0)
    LogInfo("--overlap-optimizer: {} parameter steps as their last gradient landed, {} after their device's row "
            "(no gradient this step)", s_->queued, s_->left);
}

void OptimizerOverlap::StartStep() {
  std::lock_guard<std::mutex> lock(s_->mutex);
  s_->rows_left = static_cast<int>(s_->e.local.size());
  s_->aborted = false;
  std::fill(s_->ms.begin(), s_->ms.end(), 0.0);
  for (auto& r : s_->ready) r.clear();
}

void OptimizerOverlap::Abort() {
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->aborted = true;
  }
  s_->changed.notify_all();
}

void OptimizerOverlap::BeginStep(int d) {
  State& s = *s_;
  Device& dev = *s.e.devices[d];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.stepping[d] != dev.optimizer.get()) {  // a new split (--rebalance) made a new optimizer
    s.steppers[d] = std::make_unique<PartialStepper>(*dev.optimizer);
    s.stepping[d] = dev.optimizer.get();
  }
  for (const auto& p : dev.params) {
    auto& slot = s.slots[p.unsafeGetTensorImpl()];
    if (!slot) {
      slot = std::make_shared<Slot>();
      torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<CountHook>(&s, slot));
      s.hooked.push_back(p);
    }
    slot->device = d;
    slot->expected = s.e.table.micro_batches;
    slot->count = 0;
    slot->active = true;
  }
}

double OptimizerOverlap::FinishStep(int d) {
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.mutex);
  --s.rows_left;
  s.changed.notify_all();
  while (true) {
    if (s.aborted) throw PipelineAborted();
    const int j = s.Queued();
    if (j >= 0) {
      std::vector<torch::Tensor> params = std::move(s.ready[j]);
      s.ready[j].clear();
      ++s.running;
      lock.unlock();
      s.StepOn(j, params);
      lock.lock();
      --s.running;
      s.changed.notify_all();
      continue;
    }
    if (s.rows_left == 0 && s.running == 0) break;
    s.changed.wait(lock);
  }
  // What no gradient made final here (a parameter without one this step).
  std::vector<torch::Tensor> rest;
  for (const auto& p : s.e.devices[d]->params) {
    Slot& slot = *s.slots.at(p.unsafeGetTensorImpl());
    if (slot.active.exchange(false)) rest.push_back(p);
  }
  s.left += static_cast<int64_t>(rest.size());
  lock.unlock();
  s.StepOn(d, rest);
  lock.lock();
  return s.ms[d];
}

}  // namespace ddpbench::pipeline
