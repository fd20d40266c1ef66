#include "strategies/pipeline/stage_link.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include "harness/dist.h"
#include "base/log.h"
#include "harness/training.h"
#include "strategies/pipeline/pipeline_shape.h"

namespace ddpbench {

// One send or receive in flight: its work and the tensor it reads or fills.
struct RankLink::InFlight {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<at::Tensor> tensors;
};

RankLink::RankLink(c10d::ProcessGroup& group) : group_(group) {}

RankLink::~RankLink() = default;

void RankLink::Send(const torch::Tensor& tensor, int dst, int tag) {
  auto sending = std::make_unique<InFlight>();
  sending->tensors = {tensor.contiguous()};
  CollectiveLabel label("pipeline hand-off (send)");
  sending->work = group_.send(sending->tensors, dst, tag);
  std::lock_guard<std::mutex> lock(mutex_);
  sends_.push_back(std::move(sending));
}

void RankLink::Post(int src, int tag, at::IntArrayRef shape, const torch::TensorOptions& options) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (receives_.count(tag)) return;
  }
  auto receiving = std::make_unique<InFlight>();
  receiving->tensors = {torch::empty(shape, options)};
  CollectiveLabel label("pipeline hand-off (receive)");
  receiving->work = group_.recv(receiving->tensors, src, tag);
  std::lock_guard<std::mutex> lock(mutex_);
  receives_[tag] = std::move(receiving);
}

bool RankLink::Arrived(int tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = receives_.find(tag);
  return it != receives_.end() && it->second->work->isCompleted();
}

torch::Tensor RankLink::Take(int tag) {
  std::unique_ptr<InFlight> receiving;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = receives_.find(tag);
    TORCH_CHECK(it != receives_.end(), "pipeline hand-off: tag ", tag, " was not posted");
    receiving = std::move(it->second);
    receives_.erase(it);
  }
  CollectiveLabel label("pipeline hand-off (receive)");
  receiving->work->wait();
  return receiving->tensors.front();
}

void RankLink::Flush() {
  std::vector<std::unique_ptr<InFlight>> sends;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sends.swap(sends_);
  }
  CollectiveLabel label("pipeline hand-off (send)");
  for (auto& s : sends) s->work->wait();
}

std::vector<double> FromRankZero(DistContext& dist, const std::vector<double>& values, const char* label) {
  if (dist.world == 1) return values;
  const auto options = torch::TensorOptions().dtype(torch::kDouble).device(dist.device);
  torch::Tensor count = torch::full({1}, static_cast<double>(values.size()), options);
  dist.BroadcastFrom(0, {count}, label);
  const auto n = static_cast<int64_t>(count.item<double>());
  torch::Tensor data =
      dist.is_root() ? torch::tensor(values, torch::kDouble).to(dist.device) : torch::empty({n}, options);
  dist.BroadcastFrom(0, {data}, label);
  const torch::Tensor cpu = data.to(torch::kCPU).contiguous();
  return std::vector<double>(cpu.data_ptr<double>(), cpu.data_ptr<double>() + n);
}

void AgreeOnShape(DistContext& dist, PipelineShape* shape) {
  std::vector<double> v;
  if (dist.is_root()) {
    const StagePlan& p = shape->plan;
    v = {static_cast<double>(shape->half_blocks), static_cast<double>(static_cast<int>(shape->schedule)),
         static_cast<double>(shape->virtual_stages), static_cast<double>(shape->micro_batches),
         shape->predicted_ms, static_cast<double>(p.counts.size()), static_cast<double>(p.unit_ms.size())};
    v.insert(v.end(), p.counts.begin(), p.counts.end());
    v.insert(v.end(), p.stage_ms.begin(), p.stage_ms.end());
    v.insert(v.end(), p.unit_ms.begin(), p.unit_ms.end());
    v.insert(v.end(), p.unit_forward_ms.begin(), p.unit_forward_ms.end());
  }
  v = FromRankZero(dist, v, "pipeline shape");
  shape->half_blocks = v[0] != 0;
  shape->schedule = static_cast<PipelineSchedule>(static_cast<int>(v[1]));
  shape->virtual_stages = static_cast<int>(v[2]);
  shape->micro_batches = static_cast<int>(v[3]);
  shape->predicted_ms = v[4];
  const size_t chunks = static_cast<size_t>(v[5]), units = static_cast<size_t>(v[6]);
  auto at = v.begin() + 7;
  StagePlan& p = shape->plan;
  p.counts.assign(at, at + chunks);
  p.stage_ms.assign(at + chunks, at + 2 * chunks);
  p.unit_ms.assign(at + 2 * chunks, at + 2 * chunks + units);
  p.unit_forward_ms.assign(at + 2 * chunks + units, at + 2 * chunks + 2 * units);
  if (!dist.is_root())  // its own candidates above were logged; this is what it runs
    LogInfo("--stage-ranks: taking rank 0's shape: split {}{}, --schedule={} --chunks={}", SplitCounts(p.counts),
            shape->half_blocks ? " (half blocks)" : "", PipelineScheduleName(shape->schedule),
            shape->micro_batches);
}

Boundaries MeasureBoundaries(ResNet model, int64_t image_size, const std::string& amp, torch::Device device) {
  torch::NoGradGuard no_grad;
  model->eval();
  Boundaries b;
  torch::Tensor x = torch::zeros({1, model->options().in_channels, image_size, image_size},
                                 torch::TensorOptions().dtype(model->options().dtype).device(device));
  {
    AutocastGuard autocast(amp, device);
    for (auto& unit : *model->units()) {
      x = unit.forward(x);
      b.shape.push_back(x.sizes().slice(1).vec());
      b.dtype.push_back(x.scalar_type());
    }
  }
  model->train();
  return b;
}

namespace {

// Each unit's parameters (or buffers) broadcast from the rank that runs it into
// every rank's copy. Buffers travel as float64: exact for their floats and
// counts, and a dtype every backend reduces and broadcasts.
void GatherUnitTensors(DistContext& dist, ResNet model, const std::vector<int>& owner, int stages, bool buffers) {
  torch::NoGradGuard no_grad;
  for (int r = 0; r < stages; ++r) {
    std::vector<torch::Tensor> here, moved;
    for (size_t u = 0; u < owner.size(); ++u) {
      if (owner[u] != r) continue;
      auto* unit = model->units()->ptr(u).get();
      for (auto& t : buffers ? unit->buffers() : unit->parameters()) {
        here.push_back(t.detach());
        const auto options = t.options().device(dist.device).dtype(buffers ? torch::kDouble : t.scalar_type());
        moved.push_back(r == dist.rank ? t.detach().to(options) : torch::empty(t.sizes(), options));
      }
    }
    dist.BroadcastFrom(r, moved, buffers ? "pipeline buffers" : "pipeline parameters");
    if (r != dist.rank)
      for (size_t i = 0; i < here.size(); ++i) here[i].copy_(moved[i]);
  }
}

}  // namespace

void GatherUnitParameters(DistContext& dist, ResNet model, const std::vector<int>& owner, int stages) {
  GatherUnitTensors(dist, model, owner, stages, /*buffers=*/false);
}

void GatherUnitBuffers(DistContext& dist, ResNet model, const std::vector<int>& owner, int stages) {
  GatherUnitTensors(dist, model, owner, stages, /*buffers=*/true);
}

}  // namespace ddpbench
