// How a chunk's output reaches the next chunk, and its input gradient the
// chunk before. In one process (Transport itself) every hand-off goes
// through the receiving chunk's mailbox; with --stage-ranks (the
// RankTransport MakeTransport returns) a hand-off between two ranks is a
// point-to-point message, its receive posted ahead of the action that needs
// it, while chunks on the same rank still use their mailboxes. The
// across-ranks transport also carries what the ranks must agree on: the
// step's loss, evaluation, the parameters and the row's figures.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "planning/schedules.h"
#include "strategies/pipeline/engine.h"

namespace ddpbench::pipeline {

// What an action waits for: a mailbox's hand-off, or a tensor another rank
// sent. Taken before the action's work starts (waiting is not busy time);
// On() makes it a tensor on the chunk's device, as part of the work.
struct Incoming {
  Handoff local;
  torch::Tensor remote;
  torch::Tensor On(torch::Device device) const { return remote.defined() ? remote : Receive(local, device); }
};

// A device's progress through its row of the table, for receives posted ahead.
struct RowCursor {
  size_t ahead = 0;  // row[0, ahead)'s receives are posted
  int posted = 0;    // of which not yet taken
};

class Transport {
 public:
  explicit Transport(Engine& engine) : e_(engine) {}
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Whether the chunks run on separate ranks (snapshots are not built for it).
  virtual bool AcrossRanks() const { return false; }
  // Around a step's actions: receives to post first; the loss shared after
  // (every rank returns it), and every send completed at the step's end.
  virtual void BeginStep() {}
  virtual void ShareLoss(StepState& state) {}
  virtual void EndStep() {}
  // Before and after action row[i] of a device's row.
  virtual void BeforeAction(const std::vector<PipelineAction>& row, size_t i, const StepState& state,
                            RowCursor& cursor) {}
  virtual void AfterAction(const PipelineAction& a, RowCursor& cursor) {}
  // Chunk c's gradients of the step are complete on this rank (its last
  // backward or W has run); and, before the optimizer steps, every chunk's
  // are final. Replicated pipelines all-reduce them across the replicas.
  virtual void GradientsDone(int c) {}
  virtual void FinishGradients() {}

  // Action a's input: for a forward of chunk c > 0 the activation chunk c - 1
  // sent, for a backward of a chunk before the last the gradient of its output.
  virtual Incoming Await(const PipelineAction& a);
  // Whether Await(a) would return at once.
  virtual bool Arrived(const PipelineAction& a);
  // Chunk c's output of micro-batch m to chunk c + 1, and the gradient of
  // chunk c's input back to chunk c - 1.
  virtual void SendActivation(int c, int m, const torch::Tensor& y);
  virtual void SendGradient(int c, int m, const torch::Tensor& g);

  // Evaluation: the batch through every chunk in turn; the logits (an
  // undefined tensor on a rank that does not run the last chunk).
  virtual torch::Tensor Predict(const torch::Tensor& images);
  // Every unit's weights (buffers) where this process can read them.
  virtual void GatherParameters() {}
  virtual void GatherBuffers() {}
  // Every device's and chunk's figures where this process reports them.
  virtual void ShareFigures() {}

 protected:
  Engine& e_;
};

// The transport of `engine`'s run: across ranks with --stage-ranks and more
// than one rank, else in-process. Set up after the chunks and the model.
std::unique_ptr<Transport> MakeTransport(Engine& engine);

}  // namespace ddpbench::pipeline
