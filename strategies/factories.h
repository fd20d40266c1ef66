// Factory functions of the strategies, one per strategy file, each
// registered by its file (DDPBENCH_REGISTER_STRATEGY). Declared here for code
// that makes one directly (parity's single run); a new strategy needs none.
#pragma once
#include <memory>

#include "strategies/strategy.h"

namespace ddpbench {
std::unique_ptr<Strategy> MakeSingleStrategy();
std::unique_ptr<Strategy> MakeDpStrategy();
std::unique_ptr<Strategy> MakeDdpStrategy();
std::unique_ptr<Strategy> MakeMpStrategy();
std::unique_ptr<Strategy> MakePmpStrategy();
std::unique_ptr<Strategy> MakeZero1Strategy();
std::unique_ptr<Strategy> MakeZero2Strategy();
std::unique_ptr<Strategy> MakeZero3Strategy();
}  // namespace ddpbench
