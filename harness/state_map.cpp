// See state_map.h. The optimizers keep their per-parameter state in a map
// keyed by the parameter's TensorImpl and create it on the first step that
// sees the parameter; a resume creates the same objects up front, so the next
// step takes the "state exists" branch exactly as the uninterrupted run does.
#include "harness/state_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <sstream>
#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "harness/multi_tensor_optim.h"

namespace ddpbench {
namespace {

std::string Describe(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << c10::toString(t.scalar_type());
  return os.str();
}

[[noreturn]] void Fail(const std::string& key, const std::string& what) {
  throw std::runtime_error("training state: key '" + key + "' " + what);
}

// The per-parameter fields `optimizer`'s state has, by its options.
std::vector<std::string> StateFields(torch::optim::Optimizer& optimizer, const torch::optim::OptimizerOptions& o) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&o))
    return sgd->momentum() != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&o)) {
    std::vector<std::string> fields{"step", "exp_avg", "exp_avg_sq"};
    if (adam->amsgrad()) fields.push_back("max_exp_avg_sq");
    if (auto* multi = dynamic_cast<MultiTensorAdam*>(&optimizer); multi && multi->fused())
      fields.push_back("fused_step");
    return fields;
  }
  throw std::logic_error("training state: an optimizer other than SGD or Adam");
}

// Each parameter of `optimizer` with its name, in param-group order.
template <typename Fn>
void ForEachParam(torch::optim::Optimizer& optimizer, const std::vector<std::string>& names, Fn fn) {
  size_t i = 0;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) {
      if (i >= names.size()) throw std::logic_error("training state: fewer names than optimizer parameters");
      fn(group, p, names[i++]);
    }
  if (i != names.size()) throw std::logic_error("training state: more names than optimizer parameters");
}

}  // namespace

void SaveModule(TensorMap& out, const std::string& prefix, const torch::nn::Module& module) {
  for (const auto& item : module.named_parameters()) out[prefix + item.key()] = item.value();
  SaveBuffers(out, prefix, module);
}

void SaveBuffers(TensorMap& out, const std::string& prefix, const torch::nn::Module& module) {
  for (const auto& item : module.named_buffers()) out[prefix + item.key()] = item.value();
}

std::vector<std::string> ParameterNames(torch::optim::Optimizer& optimizer, const torch::nn::Module& module) {
  std::unordered_map<const void*, std::string> by_impl;
  for (const auto& item : module.named_parameters()) by_impl[item.value().unsafeGetTensorImpl()] = item.key();
  std::vector<std::string> names;
  for (auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      auto it = by_impl.find(p.unsafeGetTensorImpl());
      if (it == by_impl.end()) throw std::logic_error("training state: a parameter the module does not hold");
      names.push_back(it->second);
    }
  return names;
}

void SaveOptimizer(TensorMap& out, const std::string& prefix, torch::optim::Optimizer& optimizer,
                   const std::vector<std::string>& names) {
  auto* multi_adam = dynamic_cast<MultiTensorAdam*>(&optimizer);
  ForEachParam(optimizer, names, [&](auto&, const torch::Tensor& p, const std::string& name) {
    auto it = optimizer.state().find(p.unsafeGetTensorImpl());
    if (it == optimizer.state().end()) return;
    const std::string key = prefix + name + ".";
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      out[key + "momentum_buffer"] = sgd->momentum_buffer();
    } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
      out[key + "step"] = torch::tensor(adam->step(), torch::kLong);
      out[key + "exp_avg"] = adam->exp_avg();
      out[key + "exp_avg_sq"] = adam->exp_avg_sq();
      if (adam->max_exp_avg_sq().defined()) out[key + "max_exp_avg_sq"] = adam->max_exp_avg_sq();
      if (multi_adam && multi_adam->fused()) out[key + "fused_step"] = multi_adam->FusedStep(p);
    } else {
      throw std::logic_error("training state: optimizer state other than SGD's or Adam's");
    }
  });
}

const torch::Tensor& StateReader::Find(const std::string& key) {
  auto it = state_.find(key);
  if (it == state_.end()) Fail(key, "is missing");
  taken_.insert(key);  // may be read again (one loss scale into every pipeline device's scaler)
  if (!it->second.defined()) Fail(key, "holds no tensor");
  return it->second;
}

const torch::Tensor& StateReader::Take(const std::string& key, const torch::Tensor& like) {
  const torch::Tensor& value = Find(key);
  if (value.sizes() != like.sizes() || value.scalar_type() != like.scalar_type())
    Fail(key, "is " + Describe(value) + ", expected " + Describe(like));
  return value;
}

const torch::Tensor& StateReader::TakeAnyShape(const std::string& key, torch::ScalarType dtype) {
  const torch::Tensor& value = Find(key);
  if (value.scalar_type() != dtype)
    Fail(key, "is " + Describe(value) + ", expected dtype " + std::string(c10::toString(dtype)));
  return value;
}

void StateReader::CopyInto(const std::string& key, const torch::Tensor& into) {
  const torch::Tensor& value = Take(key, into);
  torch::NoGradGuard no_grad;
  into.copy_(value);
}

void StateReader::TakeEqual(const std::string& key, const torch::Tensor& expected, const std::string& hint) {
  const torch::Tensor& value = Take(key, expected);
  if (value.equal(expected)) return;
  auto values = [](const torch::Tensor& t) {
    auto flat = t.to(torch::kCPU, torch::kLong).contiguous();
    std::vector<int64_t> v(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
    return fmt::format("{}", fmt::join(v, ","));
  };
  Fail(key, "is " + values(value) + ", this run's is " + values(expected) + " (" + hint + ")");
}

void StateReader::LoadModule(const std::string& prefix, const torch::nn::Module& module) {
  for (const auto& item : module.named_parameters()) CopyInto(prefix + item.key(), item.value());
  LoadBuffers(prefix, module);
}

void StateReader::LoadBuffers(const std::string& prefix, const torch::nn::Module& module) {
  for (const auto& item : module.named_buffers()) CopyInto(prefix + item.key(), item.value());
}

void StateReader::LoadOptimizer(const std::string& prefix, torch::optim::Optimizer& optimizer,
                                const std::vector<std::string>& names) {
  // Saved before the first step: no parameter has state, and none is made.
  bool any = false;
  ForEachParam(optimizer, names, [&](auto& group, const torch::Tensor&, const std::string& name) {
    for (const auto& field : StateFields(optimizer, group.options())) any = any || Has(prefix + name + "." + field);
  });
  if (!any) return;
  auto* multi_adam = dynamic_cast<MultiTensorAdam*>(&optimizer);
  torch::NoGradGuard no_grad;
  ForEachParam(optimizer, names, [&](auto& group, const torch::Tensor& p, const std::string& name) {
    const std::string key = prefix + name + ".";
    // A tensor laid out as the parameter (as the optimizers make theirs), holding the saved value.
    auto copy = [&](const std::string& field) { return torch::empty_like(p).copy_(Take(key + field, p)); };
    std::unique_ptr<torch::optim::OptimizerParamState> state;
    if (dynamic_cast<const torch::optim::SGDOptions*>(&group.options())) {
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      sgd->momentum_buffer(copy("momentum_buffer"));
      state = std::move(sgd);
    } else {
      const auto fields = StateFields(optimizer, group.options());
      auto adam = std::make_unique<torch::optim::AdamParamState>();
      adam->step(Take(key + "step", torch::zeros({}, torch::kLong)).item<int64_t>());
      adam->exp_avg(copy("exp_avg"));
      adam->exp_avg_sq(copy("exp_avg_sq"));
      if (std::find(fields.begin(), fields.end(), "max_exp_avg_sq") != fields.end())
        adam->max_exp_avg_sq(copy("max_exp_avg_sq"));
      if (multi_adam && multi_adam->fused()) {
        auto step = torch::zeros({}, p.options().dtype(torch::kFloat));
        multi_adam->SetFusedStep(p, step.copy_(Take(key + "fused_step", step)));
      }
      state = std::move(adam);
    }
    optimizer.state()[p.unsafeGetTensorImpl()] = std::move(state);
  });
}

void StateReader::Finish() const {
  for (const auto& [key, value] : state_)
    if (!taken_.count(key)) Fail(key, "is not part of this strategy's state (another strategy, model or optimizer?)");
}

}  // namespace ddpbench
