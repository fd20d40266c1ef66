// What mp/pmp --stage-ranks need between ranks: the hand-off between
// pipeline chunks that live on different ranks (RankLink), and the few
// set-up and parity exchanges (one shape for all, receive buffers' shapes,
// every stage's parameters). The hand-off is point-to-point send and receive
// on the run's process group (Gloo: CPU devices; NCCL pairs messages by
// order, not tag, so CUDA is refused in PrepareRun), addressed by tag
// (chunk, micro-batch and direction), so that the stage hand-off crosses
// whatever link joins the ranks, as torch.distributed.pipelining's stages do.
//
// Sends are started and left in flight (the tensor kept alive) until Flush,
// so a stage never waits for its successor to take an activation, as with
// the in-process Mailbox. A receive is posted before it is needed (Post):
// Gloo moves a message only once its receiver has posted for it, so a
// receive posted when the schedule reaches it would put the whole transfer
// on the critical path.
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "models/resnet.h"

namespace c10d {
class ProcessGroup;
}

namespace ddpbench {

struct DistContext;
struct PipelineShape;

class RankLink {
 public:
  // Over `group` (the pipeline's ranks; ranks below are its group ranks).
  explicit RankLink(c10d::ProcessGroup& group);
  ~RankLink();
  RankLink(const RankLink&) = delete;
  RankLink& operator=(const RankLink&) = delete;

  // Starts sending `tensor` (made contiguous) to rank `dst` under `tag`.
  void Send(const torch::Tensor& tensor, int dst, int tag);
  // Posts the receive of `tag` from rank `src` into a new tensor of `shape`
  // and `options` (allocated here, in the calling thread); no-op when it is
  // posted already.
  void Post(int src, int tag, at::IntArrayRef shape, const torch::TensorOptions& options);
  // Whether the posted receive of `tag` has completed (false if not posted).
  bool Arrived(int tag);
  // The received tensor of `tag` (posted before), once it has arrived.
  torch::Tensor Take(int tag);
  // Waits for every send started so far.
  void Flush();

 private:
  struct InFlight;
  c10d::ProcessGroup& group_;
  std::mutex mutex_;
  std::map<int, std::unique_ptr<InFlight>> receives_;
  std::vector<std::unique_ptr<InFlight>> sends_;
};

// Rank 0's `values` on every rank (collective; other ranks' are ignored);
// `label` names the collective in errors.
std::vector<double> FromRankZero(DistContext& dist, const std::vector<double>& values, const char* label);

// Each rank measured the units itself; rank 0's shape (units, schedule,
// chunks, micro-batches, split and its times) becomes every rank's, so that
// all cut and schedule the model alike. Collective.
void AgreeOnShape(DistContext& dist, PipelineShape* shape);

// What each unit of `model` hands on for one image (its batch dimension
// left out), from a forward of zeros in eval mode under the run's autocast:
// the shape and dtype of a receive's buffer.
struct Boundaries {
  std::vector<std::vector<int64_t>> shape;
  std::vector<torch::Dtype> dtype;
};
Boundaries MeasureBoundaries(ResNet model, int64_t image_size, const std::string& amp, torch::Device device);

// Every unit's parameters as the rank that runs it (`owner`, by unit: a
// stage 0..stages-1, world rank `stage` of the first pipeline: replicas hold
// the same weights) has them, copied into this rank's copies of the others'
// (the parity check's Parameters()). Collective over the world.
void GatherUnitParameters(DistContext& dist, ResNet model, const std::vector<int>& owner, int stages);
// The same for the units' buffers (BatchNorm's running statistics, for --export).
void GatherUnitBuffers(DistContext& dist, ResNet model, const std::vector<int>& owner, int stages);

}  // namespace ddpbench
