// Convolution + BatchNorm-statistics fusion (--fuse=conv-bn), written as the
// fused kernels compute it: the convolution's epilogue sums each output
// channel and its square ("genstats"), a small finalize step turns those sums
// into the batch's mean and variance, moves the running statistics and folds
// BatchNorm's weight and bias into one scale and one shift per channel, and
// the consumer (the next convolution's prologue, or the block's last kernel
// with the residual add) applies scale, shift and ReLU. No standalone
// batch-norm pass is left. This file holds that decomposition in ATen ops: it
// runs on every device (the CPU's maths, the float64 reference of the
// bookkeeping: which statistics feed which unit, how the running statistics
// move), and autograd differentiates it through the statistics, so its
// gradients are BatchNorm's. The cuDNN graph engines are a drop-in for these
// stages on a GPU; the row's `fuse` column says which served a run.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace torch::nn {
class BatchNorm2dImpl;
class Conv2dImpl;
}  // namespace torch::nn

namespace ddpbench {

// A convolution output's per-channel sums, as the genstats epilogue leaves
// them: sum and sum of squares over N, H and W, and that element count.
struct ChannelStats {
  torch::Tensor sum, sum_sq;
  int64_t count = 0;
};
ChannelStats GenStats(const torch::Tensor& y);

// BatchNorm folded into one scale and shift per channel: y * scale + shift.
struct ScaleShift {
  torch::Tensor scale, shift;
};

// The finalize step. In training mode: the batch's mean and biased variance
// from `stats` normalise, and running_mean/running_var/num_batches_tracked
// move exactly as torch::nn::BatchNorm2d moves them (unbiased variance, the
// momentum or the cumulative factor). In eval mode (or without running
// statistics tracked) `stats` is not read and the running statistics fold.
ScaleShift BnFinalize(torch::nn::BatchNorm2dImpl& bn, const ChannelStats& stats);

// relu?(y * scale + shift (+ z)): the consumer's prologue or the block's
// closing scale-shift-add-ReLU. `z` may be undefined (no residual).
torch::Tensor ApplyScaleShift(const torch::Tensor& y, const ScaleShift& ss, const torch::Tensor& z, bool relu);

// One conv -> BatchNorm (-> + z) (-> ReLU) pattern of a ResNet unit through
// the three stages above.
torch::Tensor ConvBnAct(torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                        const torch::Tensor& z, bool relu);

// A training-mode BatchNorm call's bookkeeping, as torch::nn::BatchNorm2d
// does it: counts the batch in num_batches_tracked and returns the running
// statistics' exponential-average factor (the momentum, or 1/count when none
// is set). Shared by every fused BatchNorm path.
double CountBatchFactor(torch::nn::BatchNorm2dImpl& bn);

// How many conv-BN patterns ran through ConvBnAct in this process, for the
// row's `fuse` column (ATen's stages on every device in this build).
int64_t ConvBnCalls();
void ResetConvBnCalls();

}  // namespace ddpbench
