// A training state by stable names (the snapshots'): what a strategy
// hands out between steps and takes back before its next one, so that a
// resumed run continues bit for bit. One mechanism for every strategy: a
// module's parameters and buffers, a torch::optim::Optimizer's per-parameter
// state (torch's SGD/Adam and the multi-tensor ones alike), and a StateReader
// that checks every key, shape and dtype before anything is copied.
#pragma once

#include <torch/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace ddpbench {

// Everything the next training step depends on, by stable name.
using TensorMap = std::map<std::string, torch::Tensor>;

// Adds `module`'s parameters and buffers as prefix + their dotted names
// ("model.layer1.0.bn1.running_mean"); the values alias the live tensors.
void SaveModule(TensorMap& out, const std::string& prefix, const torch::nn::Module& module);
// Its buffers only (BatchNorm's running statistics and num_batches_tracked).
void SaveBuffers(TensorMap& out, const std::string& prefix, const torch::nn::Module& module);

// The dotted name in `module` of each of `optimizer`'s parameters, in
// param-group order (matched by identity). Throws std::logic_error for a
// parameter that is not the module's.
std::vector<std::string> ParameterNames(torch::optim::Optimizer& optimizer, const torch::nn::Module& module);

// Adds the state `optimizer` holds for its parameters (in param-group order,
// named by `names`): prefix + name + ".momentum_buffer" (SGD), ".step" (int64
// scalar), ".exp_avg", ".exp_avg_sq", ".max_exp_avg_sq" (Adam, amsgrad) and
// ".fused_step" (MultiTensorAdam's device step count on the fused kernels).
// Parameters without state (before the first step) add nothing.
void SaveOptimizer(TensorMap& out, const std::string& prefix, torch::optim::Optimizer& optimizer,
                   const std::vector<std::string>& names);

// Reads a TensorMap back into a strategy: every key must be taken once, with
// the expected shape and dtype, else std::runtime_error names the first key
// that is missing, differs or (Finish) was not expected.
class StateReader {
 public:
  explicit StateReader(const TensorMap& state) : state_(state) {}
  bool Has(const std::string& key) const { return state_.count(key) != 0; }
  // state[key], checked against `like`'s shape and dtype (any device).
  const torch::Tensor& Take(const std::string& key, const torch::Tensor& like);
  // state[key], checked against a dtype only (shapes that vary, e.g. a layout).
  const torch::Tensor& TakeAnyShape(const std::string& key, torch::ScalarType dtype);
  // Copies state[key] into `into` (which keeps its device and memory layout).
  void CopyInto(const std::string& key, const torch::Tensor& into);
  // Checks that the integer tensor state[key] equals `expected` (a run's
  // layout: pipeline split, rank, world); else names both values and `hint`.
  void TakeEqual(const std::string& key, const torch::Tensor& expected, const std::string& hint);
  // Every parameter and buffer of `module` from prefix + name.
  void LoadModule(const std::string& prefix, const torch::nn::Module& module);
  void LoadBuffers(const std::string& prefix, const torch::nn::Module& module);
  // The state SaveOptimizer wrote, created in `optimizer` as its first step
  // would have created it. All or nothing: either no parameter has state
  // (saved before the first step) or every one has all of its fields.
  void LoadOptimizer(const std::string& prefix, torch::optim::Optimizer& optimizer,
                     const std::vector<std::string>& names);
  // Throws naming the first key that nothing took.
  void Finish() const;

 private:
  const torch::Tensor& Find(const std::string& key);
  const TensorMap& state_;
  std::set<std::string> taken_;
};

}  // namespace ddpbench
