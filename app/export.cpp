// See export.h. The parameters come from Strategy::Parameters() (gathered
// whole, in model order) and the buffers from rank 0's ModelBuffers(); the
// names follow from a CPU model of the same options. The file is written by
// the pickler with type tags off and the zip container torch.save uses.
#include "app/export.h"

#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <regex>

#include "base/log.h"
#include "base/results.h"
#include "harness/dist.h"
#include "strategies/strategy.h"

namespace ddpbench {
namespace {

// torch.save's container of a pickled value: data.pkl and one record per storage.
std::string SaveForTorchLoad(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* bytes, size_t n) { pickled.insert(pickled.end(), bytes, bytes + n); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t n) {
    out.append(static_cast<const char*>(bytes), n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return out;
}

bool IsStandard(const ResNetOptions& o) {
  return o.in_channels == 3 && !o.small_input && o.width == 64 && o.norm == NormKind::kBatch;
}

// The PyTorch constructor of a module torchvision's model must have instead; "" for others.
std::string Constructor(const torch::nn::Module& m) {
  if (const auto* c = dynamic_cast<const torch::nn::Conv2dImpl*>(&m)) {
    const auto& o = c->options;
    const auto padding = std::get<torch::ExpandingArray<2>>(o.padding());
    return fmt::format("Conv2d({}, {}, kernel_size={}, stride={}, padding={}, bias={})", o.in_channels(),
                       o.out_channels(), (*o.kernel_size())[0], (*o.stride())[0], (*padding)[0],
                       o.bias() ? "True" : "False");
  }
  if (const auto* b = dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m))
    return fmt::format("BatchNorm2d({})", b->options.num_features());
  if (const auto* g = dynamic_cast<const torch::nn::GroupNormImpl*>(&m))
    return fmt::format("GroupNorm({}, {})", g->options.num_groups(), g->options.num_channels());
  if (const auto* l = dynamic_cast<const torch::nn::LinearImpl*>(&m))
    return fmt::format("Linear({}, {})", l->options.in_features(), l->options.out_features());
  return "";
}

// Every module to replace in torchvision's model, by its torchvision name.
nlohmann::json Replacements(const ResNet& model) {
  nlohmann::json replace = nlohmann::json::object();
  for (const auto& item : model->named_modules("", /*include_self=*/false)) {
    const std::string made = Constructor(*item.value());
    if (!made.empty()) replace[TorchvisionName(item.key())] = made;
  }
  if (model->options().small_input) replace["maxpool"] = "Identity()";
  return replace;
}

}  // namespace

std::string TorchvisionName(const std::string& name) {
  static const std::regex kBlock(R"(^layer(\d)_(\d+)[ab]?\.)");
  std::string n = name.rfind("units.", 0) == 0 ? name.substr(6) : name;
  if (n.rfind("stem.", 0) == 0) return n.substr(5);
  if (n.rfind("head.", 0) == 0) return n.substr(5);
  return std::regex_replace(n, kBlock, "layer$1.$2.");
}

void ExportWeights(const std::string& path, const ResNetOptions& options, Strategy& strategy, DistContext& dist) {
  const std::vector<torch::Tensor> params = strategy.Parameters();  // collective
  const TensorMap state = strategy.ModelBuffers();  // collective with --stage-ranks
  if (!dist.is_root()) return;
  ResNet names(options);
  const auto named = names->named_parameters();
  if (named.size() != params.size())
    throw std::runtime_error(fmt::format("--export: {} parameters from the strategy, the model has {}", params.size(),
                                         named.size()));
  c10::Dict<std::string, at::Tensor> dict;
  for (size_t i = 0; i < params.size(); ++i)
    dict.insert(TorchvisionName(named[i].key()), params[i].detach().to(torch::kCPU).clone());
  // Buffers by torchvision name: a pipeline cut at half blocks names its
  // units layer1_0a/layer1_0b where the whole model says layer1_0.
  std::map<std::string, torch::Tensor> held;
  for (const auto& [key, tensor] : state)
    if (key.rfind("model.", 0) == 0) held[TorchvisionName(key.substr(6))] = tensor;
  for (const auto& item : names->named_buffers()) {
    const std::string name = TorchvisionName(item.key());
    auto it = held.find(name);
    if (it == held.end()) throw std::runtime_error("--export: the strategy holds no buffer " + item.key());
    dict.insert(name, it->second.detach().to(torch::kCPU).clone());
  }
  ReplaceFile(path, SaveForTorchLoad(c10::IValue(dict)));
  if (IsStandard(options)) {
    LogInfo("--export: {} ({} tensors, torchvision names; resnet{}(num_classes={}) loads it with strict=True)", path,
            dict.size(), options.depth, options.num_classes);
    return;
  }
  const nlohmann::json info = {{"torchvision", fmt::format("resnet{}", options.depth)},
                               {"num_classes", options.num_classes},
                               {"replace", Replacements(names)}};
  ReplaceFile(path + ".json", info.dump(1) + "\n");
  LogInfo("--export: {} ({} tensors, torchvision names); not torchvision's standard architecture: {}.json names "
          "the modules to replace in resnet{}(num_classes={})", path, dict.size(), path, options.depth,
          options.num_classes);
}

}  // namespace ddpbench
