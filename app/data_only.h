// --data-only: the training loop with a step that does nothing,
// so the harness times the data source alone (data_wait_ms, loader_img_s,
// throughput) with the same timer, rows and progress as a real run: "how
// many decode threads does it take to feed this batch size?".
#pragma once

#include <memory>

namespace ddpbench {

class Strategy;

// A strategy without a model: Step takes the batch and returns a zero loss.
std::unique_ptr<Strategy> MakeDataOnlyStrategy();

}  // namespace ddpbench
