// The pipeline's shared pieces: busy clocks, chunks and small helpers.
#include "strategies/pipeline/engine.h"

#include <torch/torch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/trace.h"

namespace ddpbench::pipeline {

void BusyClock::Start() {
  if (device_.is_cuda()) {
    events_.push_back(std::make_unique<CudaEventPair>(device_.index()));
    events_.back()->RecordStart();
  } else {
    start_ = Clock::now();
  }
}

void BusyClock::Stop() {
  if (device_.is_cuda()) events_.back()->RecordEnd();
  else cpu_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
}

double BusyClock::Take() {
  double ms = cpu_ms_;
  for (auto& e : events_) ms += e->ElapsedMs();
  cpu_ms_ = 0;
  events_.clear();
  return ms;
}

torch::Tensor Chunk::Forward(torch::Tensor x) {
  for (auto& u : units) x = u.forward(x);
  return x;
}

void Chunk::Train(bool on) {
  for (auto& u : units) u.ptr()->train(on);
}

void TraceMicroBatch(int chunk, int micro_batch, const char* op) {
  if (!trace::Enabled()) return;
  trace::Annotate("micro_batch", micro_batch);
  trace::Annotate("chunk", chunk);
  trace::Annotate("op", op);
}

std::string Joined(const std::vector<double>& values, const char* format) {
  std::vector<std::string> parts;
  for (double v : values) parts.push_back(fmt::format(fmt::runtime(format), v));
  return fmt::format("{}", fmt::join(parts, "/"));
}

}  // namespace ddpbench::pipeline
