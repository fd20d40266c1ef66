// ResNet-18/34/50/101/152, architecture-equivalent to torchvision's, built as a
// flat sequence of named units (stem, every residual block, head) so that model
// and pipeline parallelism can cut it between any two units without the model
// knowing anything about parallelism (the torchtitan rule).
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddpbench {

enum class NormKind {
  kBatch,        // BatchNorm2d, as torchvision
  kGroup,        // GroupNorm(gcd(32, C) groups): batch-independent maths
  kFrozenBatch,  // BatchNorm2d with fixed running statistics (always eval)
};

// How the units' BatchNorms run (--fuse). Only BatchNorm fuses.
enum class NormFuse {
  kOff,        // conv, BatchNorm2d, add, ReLU: torchvision's modules
  kBnAddRelu,  // BatchNorm (+ the residual add) + ReLU as one node (fused_norm.h)
  kConvBn,     // each conv's output statistics feed a scale-shift-ReLU (conv_bn.h)
};

struct ResNetOptions {
  int depth = 18;               // 18, 34, 50, 101 or 152
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  bool small_input = false;     // 3x3 stride-1 stem, no max-pool (28/32 px)
  int64_t width = 64;           // channels of the first stage (torchvision: 64)
  NormKind norm = NormKind::kBatch;
  // Floating-point parameters and buffers (BuildModel converts; the parity
  // check runs in Double so that only the maths, not rounding, can differ).
  c10::ScalarType dtype = c10::ScalarType::Float;
  // 4-D weights in channels-last (NHWC) strides: the layout cuDNN's fastest
  // convolution kernels want. Same values, same maths; only strides differ.
  bool channels_last = false;
  // Every residual block as two units ("layer3.1a": its first convolution(s)
  // and the shortcut, handing on both concatenated along the channels;
  // "layer3.1b": the rest), so that a pipeline can cut inside a block. The
  // same weights from the same seed, the same maths (the concatenation and
  // its slices are exact); only parameter names and order differ.
  bool half_blocks = false;
  // How BatchNorm runs (NormFuse). The same modules, parameters and buffers
  // whichever; only the forward's kernels differ.
  NormFuse fuse = NormFuse::kOff;
  // Units that recompute their forward in their backward instead of keeping
  // their activations (--recompute, models/recompute.h), by name: a unit
  // ("layer3.1", "layer3.1a") or a block, which marks both of its halves in a
  // half-block model (a half's name marks its whole block in a whole-block
  // one). Empty: none.
  std::vector<std::string> recompute;
};

// Per unit of ResNetUnitNames(options), whether options.recompute marks it:
// by its name, its whole block's (a half "layer1.0a" of "layer1.0"), or a
// half's (a whole-block unit).
std::vector<bool> RecomputedUnits(const ResNetOptions& options);

// Throws std::invalid_argument naming the bad value and what is accepted.
void ValidateResNetOptions(const ResNetOptions& options);
// The names of the units ResNetImpl builds from `options` ("stem",
// "layer1.0" or with half blocks "layer1.0a", ..., "head"), without building it.
std::vector<std::string> ResNetUnitNames(const ResNetOptions& options);
NormKind ParseNormKind(const std::string& name);  // batch|group|frozen-bn
std::string NormKindName(NormKind kind);
// "off", "bn-add-relu", "conv-bn" (the --fuse values) and back; the parse
// throws std::invalid_argument naming the value and what is accepted.
std::string NormFuseName(NormFuse fuse);
NormFuse ParseNormFuse(const std::string& name);

class ResNetImpl : public torch::nn::Cloneable<ResNetImpl> {
 public:
  explicit ResNetImpl(ResNetOptions options = {});
  void reset() override;
  torch::Tensor forward(torch::Tensor x);
  // Deep copy (also what parallel::replicate calls).  Overrides Cloneable's
  // because torch::nn::Sequential::clone renumbers its children ("0", "1", ...),
  // which loses the unit names and breaks replicate's by-name walk; it also
  // puts the global CPU RNG back as it found it, so cloning or replicating a
  // model never shifts the random stream that seeded runs depend on.
  std::shared_ptr<torch::nn::Module> clone(
      const std::optional<torch::Device>& device = std::nullopt) const override;

  const ResNetOptions& options() const { return options_; }
  // Units in execution order: "stem", "layer1.0", ..., "layer4.N", "head"
  // (with half_blocks: "layer1.0a", "layer1.0b", ...).
  // units()[i] maps a tensor to a tensor; forward == running them in order.
  torch::nn::Sequential& units() { return units_; }
  const std::vector<std::string>& unit_names() const { return unit_names_; }
  // Parameter count of each unit, in unit order (for balancing splits).
  std::vector<int64_t> UnitParameterCounts() const;
  // Which units recompute their forward in backward (--recompute,
  // models/recompute.h), one flag per unit; empty: none. Clones keep them.
  void SetRecompute(const std::vector<bool>& per_unit);
  std::vector<bool> Recomputed() const;

 private:
  ResNetOptions options_;
  torch::nn::Sequential units_{nullptr};
  std::vector<std::string> unit_names_;
};
TORCH_MODULE(ResNet);

int64_t CountParameters(const torch::nn::Module& module);

// Multiply-accumulates of one forward pass of one image of height x width
// through every convolution and the linear head (norms, activations, pooling
// and additions are not counted, as in torchvision's published GFLOPS), from
// the same depth table the model is built from. A training step costs three
// forward passes (backward: gradient of the input and of the weights).
double ResNetForwardMacs(const ResNetOptions& options, int64_t height, int64_t width);
// The same, unit by unit (ResNetUnitNames' order; they sum to the whole).
std::vector<double> ResNetUnitForwardMacs(const ResNetOptions& options, int64_t height, int64_t width);

// Lower bounds of a model's memory, from the same depth table without building
// it (so that a run too large for its device is refused before it allocates):
// convolution and head weights (norms left out) and the elements of every
// convolution's output for one image (what backward must keep at least).
struct ResNetFootprint {
  double weights = 0;
  double activations_per_image = 0;
};
ResNetFootprint ResNetFootprintOf(const ResNetOptions& options, int64_t height, int64_t width);

}  // namespace ddpbench
