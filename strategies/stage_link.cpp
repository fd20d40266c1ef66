#include "strategies/stage_link.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include "harness/dist.h"

namespace ddpbench {

// One send or receive in flight: its work and the tensor it reads or fills.
struct RankLink::InFlight {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<at::Tensor> tensors;
};

RankLink::RankLink(DistContext& dist) : dist_(dist) {
  TORCH_CHECK(dist.group, "--stage-ranks: the ranks have no process group");
}

RankLink::~RankLink() = default;

void RankLink::Send(const torch::Tensor& tensor, int dst, int tag) {
  auto sending = std::make_unique<InFlight>();
  sending->tensors = {tensor.contiguous()};
  CollectiveLabel label("pipeline hand-off (send)");
  sending->work = dist_.group->send(sending->tensors, dst, tag);
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
  receiving->work = dist_.group->recv(receiving->tensors, src, tag);
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

}  // namespace ddpbench
