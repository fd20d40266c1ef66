// ResNet built as torchvision builds it (same layers, shapes, init and even the
// order in which modules draw from the global RNG, so a seed gives torchvision's
// weights; a test pins resnet18 at seed 0), but laid out as a flat
// Sequential of named units so parallel strategies can cut it anywhere.  Every
// custom module is a Cloneable whose reset() (re)creates and registers all of
// its children, because LibTorch's clone() and parallel::replicate rebuild a
// module by copy-constructing it and calling reset(); norms are held as
// AnyModule so one block type serves BatchNorm, GroupNorm and frozen BatchNorm.
#include "models/resnet.h"

#include "models/conv_bn.h"
#include "models/fused_norm.h"
#include "models/recompute.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace ddpbench {
namespace {

constexpr double kNormEps = 1e-5;  // torchvision / PyTorch default

// ---------------------------------------------------------------------------
// Norm layers.

// BatchNorm2d whose statistics are fixed: it always normalises with the running
// statistics, in training mode too, and never updates them.  The affine weight
// and bias stay trainable parameters (unlike torchvision's FrozenBatchNorm2d,
// where they are buffers), so parameter counts match the other norm kinds.
class FrozenBatchNorm2dImpl : public torch::nn::Cloneable<FrozenBatchNorm2dImpl> {
 public:
  explicit FrozenBatchNorm2dImpl(int64_t num_features) : num_features_(num_features) {
    reset();
  }

  void reset() override {
    weight = register_parameter("weight", torch::ones({num_features_}));
    bias = register_parameter("bias", torch::zeros({num_features_}));
    running_mean = register_buffer("running_mean", torch::zeros({num_features_}));
    running_var = register_buffer("running_var", torch::ones({num_features_}));
  }

  torch::Tensor forward(torch::Tensor x) {
    return torch::batch_norm(x, weight, bias, running_mean, running_var,
                             /*training=*/false, /*momentum=*/0.0, kNormEps,
                             at::globalContext().userEnabledCuDNN());
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "FrozenBatchNorm2d(" << num_features_ << ", eps=" << kNormEps << ")";
  }

  torch::Tensor weight, bias, running_mean, running_var;

 private:
  int64_t num_features_;
};
TORCH_MODULE(FrozenBatchNorm2d);

// gcd(32, C) always divides C, so every width is valid; for C a multiple of 32
// it is torchvision's usual 32 groups.
int64_t GroupNormGroups(int64_t channels) { return std::gcd<int64_t>(32, channels); }

torch::nn::AnyModule MakeNorm(NormKind kind, int64_t channels) {
  switch (kind) {
    case NormKind::kBatch:
      return torch::nn::AnyModule(torch::nn::BatchNorm2d(
          torch::nn::BatchNorm2dOptions(channels).eps(kNormEps)));
    case NormKind::kGroup:
      return torch::nn::AnyModule(torch::nn::GroupNorm(
          torch::nn::GroupNormOptions(GroupNormGroups(channels), channels)
              .eps(kNormEps)
              .affine(true)));
    case NormKind::kFrozenBatch:
      return torch::nn::AnyModule(FrozenBatchNorm2d(channels));
  }
  throw std::invalid_argument("unknown NormKind value " +
                              std::to_string(static_cast<int>(kind)));
}

// In-place ReLU, as torchvision's ReLU(inplace=True): saves one activation per
// call; safe because no norm here needs its own output for backward.
torch::Tensor Relu(torch::Tensor x) {
  x.relu_();
  return x;
}

// The units' conv -> norm (-> + z) -> ReLU patterns: under kConvBn through
// the convolution + BatchNorm-statistics stages (conv_bn.h), under
// kBnAddRelu the convolution and then one fused norm epilogue
// (fused_norm.h), else as torchvision writes them (the reference, and every
// other norm). `z` is the residual, or undefined.
torch::Tensor ConvNormRelu(torch::nn::Conv2d& conv, torch::nn::AnyModule& norm, const torch::Tensor& x,
                           const torch::Tensor& z, NormFuse fuse) {
  auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(norm.ptr());
  if (bn && fuse == NormFuse::kConvBn) return ConvBnAct(*conv, *bn, x, z, /*relu=*/true);
  torch::Tensor y = conv->forward(x);
  if (bn && fuse == NormFuse::kBnAddRelu) return BatchNormAddRelu(*bn, y, z);
  y = norm.forward(y);
  return Relu(z.defined() ? y.add_(z) : y);
}

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                       int64_t padding) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(padding)
                               .bias(false));
}

// conv1x1 + norm, as torchvision's _make_layer; numeric child names "0", "1"
// match torchvision's "downsample.0" / "downsample.1" and survive
// Sequential::clone, which renumbers.
torch::nn::Sequential MakeDownsample(int64_t in, int64_t out, int64_t stride, NormKind norm) {
  torch::nn::Sequential downsample;
  downsample->push_back(Conv(in, out, 1, stride, 0));
  downsample->push_back(MakeNorm(norm, out));
  return downsample;
}

// The shortcut's conv + norm; under kConvBn its BatchNorm folds to a scale
// and shift like every other (no ReLU).
torch::Tensor RunDownsample(torch::nn::Sequential& downsample, const torch::Tensor& x, NormFuse fuse) {
  if (fuse == NormFuse::kConvBn) {
    auto* conv = downsample[0]->as<torch::nn::Conv2dImpl>();
    auto* bn = downsample[1]->as<torch::nn::BatchNorm2dImpl>();
    if (conv && bn) return ConvBnAct(*conv, *bn, x, torch::Tensor(), /*relu=*/false);
  }
  return downsample->forward(x);
}

// ---------------------------------------------------------------------------
// Units.

class StemImpl : public torch::nn::Cloneable<StemImpl>, public Recomputable {
 public:
  StemImpl(int64_t in_channels, int64_t width, bool small_input, NormKind norm, NormFuse fuse = NormFuse::kOff)
      : in_channels_(in_channels), width_(width), small_input_(small_input), norm_(norm), fuse_(fuse) {
    reset();
  }

  void reset() override {
    conv1_ = register_module("conv1", small_input_ ? Conv(in_channels_, width_, 3, 1, 1)
                                                   : Conv(in_channels_, width_, 7, 2, 3));
    bn1_ = MakeNorm(norm_, width_);
    register_module("bn1", bn1_.ptr());
    maxpool_ = nullptr;
    if (!small_input_) {
      maxpool_ = register_module(
          "maxpool", torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)));
    }
  }

  torch::Tensor forward(torch::Tensor x) { return Forward(*this, x); }
  torch::Tensor Run(torch::Tensor x) override {
    x = ConvNormRelu(conv1_, bn1_, x, torch::Tensor(), fuse_);
    return maxpool_ ? maxpool_->forward(x) : x;
  }

 private:
  int64_t in_channels_, width_;
  bool small_input_;
  NormKind norm_;
  NormFuse fuse_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::AnyModule bn1_;
  torch::nn::MaxPool2d maxpool_{nullptr};
};
TORCH_MODULE(Stem);

// Which part of a residual block a unit holds (ResNetOptions::half_blocks).
enum class BlockPart { kWhole, kFirst, kSecond };

class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl>, public Recomputable {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlockImpl(int64_t in_channels, int64_t planes, int64_t stride, NormKind norm,
                 BlockPart part = BlockPart::kWhole, NormFuse fuse = NormFuse::kOff)
      : in_channels_(in_channels), planes_(planes), stride_(stride), norm_(norm), part_(part), fuse_(fuse) {
    reset();
  }

  void reset() override {
    // torchvision creates the downsample before the block's own convs; doing
    // the same keeps the RNG draws in the same order (a first half creates
    // the downsample and conv1, the second half conv2: the same order again).
    const bool first = part_ != BlockPart::kSecond, second = part_ != BlockPart::kFirst;
    torch::nn::Sequential downsample{nullptr};
    if (first && (stride_ != 1 || in_channels_ != planes_ * kExpansion)) {
      downsample = MakeDownsample(in_channels_, planes_ * kExpansion, stride_, norm_);
    }
    if (first) {
      conv1_ = register_module("conv1", Conv(in_channels_, planes_, 3, stride_, 1));
      bn1_ = MakeNorm(norm_, planes_);
      register_module("bn1", bn1_.ptr());
    }
    if (second) {
      conv2_ = register_module("conv2", Conv(planes_, planes_, 3, 1, 1));
      bn2_ = MakeNorm(norm_, planes_);
      register_module("bn2", bn2_.ptr());
    }
    downsample_ = downsample ? register_module("downsample", downsample)
                             : torch::nn::Sequential{nullptr};
  }

  torch::Tensor forward(torch::Tensor x) { return Forward(*this, x); }
  torch::Tensor Run(torch::Tensor x) override {
    if (part_ == BlockPart::kSecond) {
      return ConvNormRelu(conv2_, bn2_, x.narrow(1, 0, planes_), x.narrow(1, planes_, planes_ * kExpansion), fuse_);
    }
    torch::Tensor identity = downsample_ ? RunDownsample(downsample_, x, fuse_) : x;
    torch::Tensor out = ConvNormRelu(conv1_, bn1_, x, torch::Tensor(), fuse_);
    if (part_ == BlockPart::kFirst) return torch::cat({out, identity}, 1);
    return ConvNormRelu(conv2_, bn2_, out, identity, fuse_);
  }

 private:
  int64_t in_channels_, planes_, stride_;
  NormKind norm_;
  BlockPart part_;
  NormFuse fuse_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::AnyModule bn1_, bn2_;
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// torchvision's Bottleneck (ResNet v1.5): the stride sits on the 3x3 conv.
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl>, public Recomputable {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t in_channels, int64_t planes, int64_t stride, NormKind norm,
                 BlockPart part = BlockPart::kWhole, NormFuse fuse = NormFuse::kOff)
      : in_channels_(in_channels), planes_(planes), stride_(stride), norm_(norm), part_(part), fuse_(fuse) {
    reset();
  }

  void reset() override {
    // As BasicBlock: the first half makes the downsample, conv1 and conv2,
    // the second conv3, in torchvision's creation order.
    const bool first = part_ != BlockPart::kSecond, second = part_ != BlockPart::kFirst;
    torch::nn::Sequential downsample{nullptr};
    if (first && (stride_ != 1 || in_channels_ != planes_ * kExpansion)) {
      downsample = MakeDownsample(in_channels_, planes_ * kExpansion, stride_, norm_);
    }
    if (first) {
      conv1_ = register_module("conv1", Conv(in_channels_, planes_, 1, 1, 0));
      bn1_ = MakeNorm(norm_, planes_);
      register_module("bn1", bn1_.ptr());
      conv2_ = register_module("conv2", Conv(planes_, planes_, 3, stride_, 1));
      bn2_ = MakeNorm(norm_, planes_);
      register_module("bn2", bn2_.ptr());
    }
    if (second) {
      conv3_ = register_module("conv3", Conv(planes_, planes_ * kExpansion, 1, 1, 0));
      bn3_ = MakeNorm(norm_, planes_ * kExpansion);
      register_module("bn3", bn3_.ptr());
    }
    downsample_ = downsample ? register_module("downsample", downsample)
                             : torch::nn::Sequential{nullptr};
  }

  torch::Tensor forward(torch::Tensor x) { return Forward(*this, x); }
  torch::Tensor Run(torch::Tensor x) override {
    if (part_ == BlockPart::kSecond) {
      return ConvNormRelu(conv3_, bn3_, x.narrow(1, 0, planes_), x.narrow(1, planes_, planes_ * kExpansion), fuse_);
    }
    torch::Tensor identity = downsample_ ? RunDownsample(downsample_, x, fuse_) : x;
    torch::Tensor out = ConvNormRelu(conv1_, bn1_, x, torch::Tensor(), fuse_);
    out = ConvNormRelu(conv2_, bn2_, out, torch::Tensor(), fuse_);
    if (part_ == BlockPart::kFirst) return torch::cat({out, identity}, 1);
    return ConvNormRelu(conv3_, bn3_, out, identity, fuse_);
  }

 private:
  int64_t in_channels_, planes_, stride_;
  NormKind norm_;
  BlockPart part_;
  NormFuse fuse_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::AnyModule bn1_, bn2_, bn3_;
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

class HeadImpl : public torch::nn::Cloneable<HeadImpl>, public Recomputable {
 public:
  HeadImpl(int64_t in_features, int64_t num_classes)
      : in_features_(in_features), num_classes_(num_classes) {
    reset();
  }

  void reset() override {
    avgpool_ = register_module(
        "avgpool", torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions({1, 1})));
    // LibTorch's default Linear init is PyTorch's, which torchvision keeps.
    fc_ = register_module("fc", torch::nn::Linear(in_features_, num_classes_));
  }

  torch::Tensor forward(torch::Tensor x) { return Forward(*this, x); }
  torch::Tensor Run(torch::Tensor x) override {
    return fc_->forward(torch::flatten(avgpool_->forward(x), 1));
  }

 private:
  int64_t in_features_, num_classes_;
  torch::nn::AdaptiveAvgPool2d avgpool_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(Head);

// ---------------------------------------------------------------------------

struct DepthSpec {
  bool bottleneck;
  std::array<int, 4> blocks;
};

constexpr std::array<std::pair<int, DepthSpec>, 5> kDepths = {{
    {18, {false, {2, 2, 2, 2}}},
    {34, {false, {3, 4, 6, 3}}},
    {50, {true, {3, 4, 6, 3}}},
    {101, {true, {3, 4, 23, 3}}},
    {152, {true, {3, 8, 36, 3}}},
}};

const DepthSpec* FindDepth(int depth) {
  for (const auto& [d, spec] : kDepths) {
    if (d == depth) return &spec;
  }
  return nullptr;
}

// Saves the default CPU generator's state and restores it on destruction.
// The generator's mutex is held only while reading or writing the state: the
// work in between draws from the same generator and takes that mutex itself.
class CpuRngStateGuard {
 public:
  CpuRngStateGuard() : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~CpuRngStateGuard() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }
  CpuRngStateGuard(const CpuRngStateGuard&) = delete;
  CpuRngStateGuard& operator=(const CpuRngStateGuard&) = delete;

 private:
  at::Generator generator_;
  torch::Tensor state_;
};

// Copies `from`'s tensors into `to` (same structure, same names) by name.
void CopyTensorsByName(const torch::OrderedDict<std::string, torch::Tensor>& from,
                       torch::OrderedDict<std::string, torch::Tensor>& to,
                       const std::optional<torch::Device>& device, const char* what) {
  TORCH_CHECK(from.size() == to.size(), "ResNet clone: ", what, " count differs (", from.size(),
              " vs ", to.size(), ")");
  for (const auto& item : from) {
    torch::Tensor* target = to.find(item.key());
    TORCH_CHECK(target != nullptr, "ResNet clone: ", what, " '", item.key(),
                "' missing in the copy");
    const torch::Tensor& source = item.value();
    target->set_data(device && source.device() != *device ? source.to(*device)
                                                          : source.clone());
    if (target->is_leaf()) target->set_requires_grad(source.requires_grad());
  }
}

}  // namespace

// ---------------------------------------------------------------------------

namespace {

// Whether ResNetOptions::recompute's `name` marks `unit`: the unit itself,
// its whole block (a half "layer1.0a" of "layer1.0"), or a half of it.
bool RecomputeMarks(const std::string& name, const std::string& unit) {
  auto whole = [](const std::string& n) {
    const bool half = n.rfind("layer", 0) == 0 && !n.empty() && (n.back() == 'a' || n.back() == 'b');
    return half ? n.substr(0, n.size() - 1) : n;
  };
  return name == unit || name == whole(unit) || whole(name) == unit;
}

// Everything ValidateResNetOptions checks but the recompute names (which
// need the unit names, and so this).
void ValidateStructure(const ResNetOptions& options) {
  if (FindDepth(options.depth) == nullptr) {
    throw std::invalid_argument("ResNet depth " + std::to_string(options.depth) +
                                " is not supported; accepted depths: 18, 34, 50, 101, 152");
  }
  if (options.num_classes < 1) {
    throw std::invalid_argument("ResNet num_classes " + std::to_string(options.num_classes) +
                                " is invalid; it must be at least 1");
  }
  if (options.in_channels < 1) {
    throw std::invalid_argument("ResNet in_channels " + std::to_string(options.in_channels) +
                                " is invalid; it must be at least 1");
  }
  // Any width >= 1 works with every norm kind: group norm uses gcd(32, C)
  // groups, which always divides C.
  if (options.width < 1) {
    throw std::invalid_argument("ResNet width " + std::to_string(options.width) +
                                " is invalid; it must be at least 1 (any positive width works, "
                                "group norm uses gcd(32, channels) groups)");
  }
  if (options.fuse != NormFuse::kOff && options.norm != NormKind::kBatch)
    throw std::invalid_argument("fused BatchNorm (" + NormFuseName(options.fuse) + ") with norm " + NormKindName(options.norm) +
                                ": the fusion is of BatchNorm; use norm batch or leave fusion off");
  switch (options.norm) {
    case NormKind::kBatch:
    case NormKind::kGroup:
    case NormKind::kFrozenBatch:
      break;
    default:
      throw std::invalid_argument("ResNet norm kind value " +
                                  std::to_string(static_cast<int>(options.norm)) +
                                  " is invalid; accepted: batch, group, frozen-bn");
  }
}

}  // namespace

void ValidateResNetOptions(const ResNetOptions& options) {
  ValidateStructure(options);
  if (options.recompute.empty()) return;
  const std::vector<std::string> units = ResNetUnitNames(options);
  for (const auto& r : options.recompute)
    if (std::none_of(units.begin(), units.end(), [&](const std::string& u) { return RecomputeMarks(r, u); }))
      throw std::invalid_argument("ResNet recompute: '" + r + "' is not a unit or block of this model");
}

std::vector<bool> RecomputedUnits(const ResNetOptions& options) {
  std::vector<bool> marked;
  for (const auto& unit : ResNetUnitNames(options))
    marked.push_back(std::any_of(options.recompute.begin(), options.recompute.end(),
                                 [&](const std::string& r) { return RecomputeMarks(r, unit); }));
  return marked;
}

NormKind ParseNormKind(const std::string& name) {
  if (name == "batch") return NormKind::kBatch;
  if (name == "group") return NormKind::kGroup;
  if (name == "frozen-bn") return NormKind::kFrozenBatch;
  throw std::invalid_argument("unknown norm kind '" + name +
                              "'; accepted: batch, group, frozen-bn");
}

std::string NormFuseName(NormFuse fuse) {
  switch (fuse) {
    case NormFuse::kOff:
      return "off";
    case NormFuse::kBnAddRelu:
      return "bn-add-relu";
    case NormFuse::kConvBn:
      return "conv-bn";
  }
  return "unknown";
}

NormFuse ParseNormFuse(const std::string& name) {
  for (NormFuse f : {NormFuse::kOff, NormFuse::kBnAddRelu, NormFuse::kConvBn})
    if (NormFuseName(f) == name) return f;
  throw std::invalid_argument("fuse value '" + name + "' is invalid; accepted: off, bn-add-relu, conv-bn");
}

std::string NormKindName(NormKind kind) {
  switch (kind) {
    case NormKind::kBatch:
      return "batch";
    case NormKind::kGroup:
      return "group";
    case NormKind::kFrozenBatch:
      return "frozen-bn";
  }
  throw std::invalid_argument("unknown NormKind value " +
                              std::to_string(static_cast<int>(kind)));
}

std::vector<std::string> ResNetUnitNames(const ResNetOptions& options) {
  ValidateStructure(options);
  const DepthSpec& spec = *FindDepth(options.depth);
  std::vector<std::string> names{"stem"};
  for (int stage = 0; stage < 4; ++stage)
    for (int block = 0; block < spec.blocks[stage]; ++block) {
      const std::string unit = "layer" + std::to_string(stage + 1) + "." + std::to_string(block);
      if (options.half_blocks) {
        names.push_back(unit + "a");
        names.push_back(unit + "b");
      } else {
        names.push_back(unit);
      }
    }
  names.push_back("head");
  return names;
}

ResNetImpl::ResNetImpl(ResNetOptions options) : options_(options) { reset(); }

void ResNetImpl::reset() {
  ValidateResNetOptions(options_);
  const DepthSpec& spec = *FindDepth(options_.depth);
  const int64_t expansion =
      spec.bottleneck ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;

  // reset() may be called again to re-initialise; drop the previous units.
  if (named_children().contains("units")) unregister_module("units");
  units_ = torch::nn::Sequential();
  unit_names_ = ResNetUnitNames(options_);

  units_->push_back("stem", Stem(options_.in_channels, options_.width, options_.small_input,
                                 options_.norm, options_.fuse));
  int64_t channels = options_.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = options_.width << stage;
    for (int block = 0; block < spec.blocks[stage]; ++block) {
      const int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      const std::string child = "layer" + std::to_string(stage + 1) + "_" + std::to_string(block);
      auto add = [&](const std::string& suffix, BlockPart part) {
        if (spec.bottleneck) {
          units_->push_back(child + suffix, Bottleneck(channels, planes, stride, options_.norm, part, options_.fuse));
        } else {
          units_->push_back(child + suffix, BasicBlock(channels, planes, stride, options_.norm, part, options_.fuse));
        }
      };
      if (options_.half_blocks) {
        add("a", BlockPart::kFirst);
        add("b", BlockPart::kSecond);
      } else {
        add("", BlockPart::kWhole);
      }
      channels = planes * expansion;
    }
  }
  units_->push_back("head", Head(channels, options_.num_classes));
  register_module("units", units_);
  SetRecompute(RecomputedUnits(options_));

  // torchvision's init loop, over modules in the same (pre-)order. A first
  // half's downsample comes after the second half's modules, where the whole
  // block's pre-order puts it, so half blocks get the same weights.
  std::vector<std::shared_ptr<torch::nn::Module>> order, deferred;
  for (const auto& unit : units_->named_children()) {
    const bool first_half = options_.half_blocks && unit.key().back() == 'a';
    for (const auto& m : unit.value()->named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
      (first_half && m.key().rfind("downsample", 0) == 0 ? deferred : order).push_back(m.value());
    }
    if (!first_half) {
      order.insert(order.end(), deferred.begin(), deferred.end());
      deferred.clear();
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& module : order) {
    if (auto* conv = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, /*a=*/0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1);
      bn->bias.zero_();
    } else if (auto* gn = module->as<torch::nn::GroupNorm>()) {
      gn->weight.fill_(1);
      gn->bias.zero_();
    } else if (auto* frozen = module->as<FrozenBatchNorm2d>()) {
      frozen->weight.fill_(1);
      frozen->bias.zero_();
    }
  }
}

std::shared_ptr<torch::nn::Module> ResNetImpl::clone(
    const std::optional<torch::Device>& device) const {
  torch::NoGradGuard no_grad;
  std::shared_ptr<ResNetImpl> copy;
  {
    // Building the copy initialises it from the global RNG; undo those draws.
    CpuRngStateGuard rng_guard;
    copy = std::make_shared<ResNetImpl>(options_);
  }
  auto to_params = copy->named_parameters(/*recurse=*/true);
  CopyTensorsByName(named_parameters(/*recurse=*/true), to_params, device, "parameter");
  auto to_buffers = copy->named_buffers(/*recurse=*/true);
  CopyTensorsByName(named_buffers(/*recurse=*/true), to_buffers, device, "buffer");

  // Training flags, module by module (pre-order, so a parent's recursive
  // train() is overridden by its children's own flags afterwards).
  const auto from_modules = named_modules(/*name_prefix=*/"", /*include_self=*/true);
  const auto to_modules = copy->named_modules(/*name_prefix=*/"", /*include_self=*/true);
  TORCH_CHECK(from_modules.size() == to_modules.size(), "ResNet clone: module count differs");
  for (size_t i = 0; i < from_modules.size(); ++i) {
    to_modules[i].value()->train(from_modules[i].value()->is_training());
  }
  copy->SetRecompute(Recomputed());  // as this one has them now
  return copy;
}

void ResNetImpl::SetRecompute(const std::vector<bool>& per_unit) {
  const auto units = units_->children();
  TORCH_CHECK(per_unit.empty() || per_unit.size() == units.size(), "recompute: ", per_unit.size(),
              " flags for ", units.size(), " units");
  for (size_t u = 0; u < units.size(); ++u)
    dynamic_cast<Recomputable&>(*units[u]).set_recompute(!per_unit.empty() && per_unit[u]);
}

std::vector<bool> ResNetImpl::Recomputed() const {
  std::vector<bool> out;
  for (const auto& unit : units_->children()) out.push_back(dynamic_cast<const Recomputable&>(*unit).recompute());
  return out;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) { return units_->forward(x); }

std::vector<int64_t> ResNetImpl::UnitParameterCounts() const {
  std::vector<int64_t> counts;
  counts.reserve(unit_names_.size());
  for (const auto& unit : units_->children()) counts.push_back(CountParameters(*unit));
  return counts;
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& parameter : module.parameters(/*recurse=*/true)) total += parameter.numel();
  return total;
}

namespace {

// A convolution's output side and its multiply-accumulates, accumulated.
struct MacCounter {
  double macs = 0, weights = 0, outputs = 0;
  int64_t ConvSide(int64_t side, int64_t kernel, int64_t stride, int64_t pad) const {
    return (side + 2 * pad - kernel) / stride + 1;
  }
  // Returns the output {h, w}.
  std::pair<int64_t, int64_t> Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad,
                                   std::pair<int64_t, int64_t> hw) {
    const int64_t h = ConvSide(hw.first, kernel, stride, pad), w = ConvSide(hw.second, kernel, stride, pad);
    macs += static_cast<double>(in) * out * kernel * kernel * h * w;
    weights += static_cast<double>(in) * out * kernel * kernel;
    outputs += static_cast<double>(out) * h * w;
    return {h, w};
  }
};

}  // namespace

namespace {

// Walks the convolutions of the depth table; returns the head's input
// channels. `per_unit` (optional) gets the stem's and each block's (or each
// half's) multiply-accumulates, in unit order, without the head's.
int64_t CountConvolutions(const ResNetOptions& options, int64_t height, int64_t width, MacCounter& count,
                          std::vector<double>* per_unit = nullptr) {
  ValidateResNetOptions(options);
  const DepthSpec& spec = *FindDepth(options.depth);
  const int64_t expansion = spec.bottleneck ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
  double mark = 0;
  auto unit_ends = [&] {
    if (per_unit) per_unit->push_back(count.macs - mark);
    mark = count.macs;
  };
  std::pair<int64_t, int64_t> hw{height, width};
  if (options.small_input) {
    hw = count.Conv(options.in_channels, options.width, 3, 1, 1, hw);
  } else {
    hw = count.Conv(options.in_channels, options.width, 7, 2, 3, hw);
    hw = {count.ConvSide(hw.first, 3, 2, 1), count.ConvSide(hw.second, 3, 2, 1)};  // max-pool
  }
  unit_ends();
  int64_t channels = options.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = options.width << stage;
    for (int block = 0; block < spec.blocks[stage]; ++block) {
      const int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      const auto in_hw = hw;
      // A first half holds the shortcut and every convolution but the last.
      if (stride != 1 || channels != planes * expansion) count.Conv(channels, planes * expansion, 1, stride, 0, in_hw);
      if (spec.bottleneck) {
        hw = count.Conv(channels, planes, 1, 1, 0, hw);
        hw = count.Conv(planes, planes, 3, stride, 1, hw);
        if (options.half_blocks) unit_ends();
        hw = count.Conv(planes, planes * expansion, 1, 1, 0, hw);
      } else {
        hw = count.Conv(channels, planes, 3, stride, 1, hw);
        if (options.half_blocks) unit_ends();
        hw = count.Conv(planes, planes, 3, 1, 1, hw);
      }
      unit_ends();
      channels = planes * expansion;
    }
  }
  return channels;
}

}  // namespace

std::vector<double> ResNetUnitForwardMacs(const ResNetOptions& options, int64_t height, int64_t width) {
  MacCounter count;
  std::vector<double> per_unit;
  const int64_t channels = CountConvolutions(options, height, width, count, &per_unit);
  per_unit.push_back(static_cast<double>(channels) * options.num_classes);
  return per_unit;
}

double ResNetForwardMacs(const ResNetOptions& options, int64_t height, int64_t width) {
  MacCounter count;
  const int64_t channels = CountConvolutions(options, height, width, count);
  return count.macs + static_cast<double>(channels) * options.num_classes;
}

ResNetFootprint ResNetFootprintOf(const ResNetOptions& options, int64_t height, int64_t width) {
  MacCounter count;
  const int64_t channels = CountConvolutions(options, height, width, count);
  return {count.weights + static_cast<double>(channels + 1) * options.num_classes, count.outputs};
}

}  // namespace ddpbench
