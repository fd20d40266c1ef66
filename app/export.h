// --export=FILE.pt: a run's trained weights as a PyTorch state_dict with
// torchvision's ResNet names ("units.layer1_0.conv1.weight" ->
// "layer1.0.conv1.weight"), written so that plain torch.load() reads it
// (no TorchScript type tags) and torchvision.models.resnetN(num_classes=K)
// .load_state_dict(..., strict=True) accepts it for the standard
// architecture (3-channel input, 7x7 stem with max-pool, width 64,
// BatchNorm). Any other architecture gets FILE.pt.json beside it, naming
// every torchvision module to replace and its PyTorch constructor.
#pragma once

#include <string>

#include "models/resnet.h"

namespace ddpbench {

class Strategy;
struct DistContext;

// torchvision's name of a ddpbench ResNet parameter or buffer.
std::string TorchvisionName(const std::string& name);

// Collective (the strategy's parameters are gathered); rank 0 writes `path`.
void ExportWeights(const std::string& path, const ResNetOptions& options, Strategy& strategy, DistContext& dist);

}  // namespace ddpbench
