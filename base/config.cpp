// RunConfig's own arithmetic and the checks the strategies repeat once their
// data is open (micro-batches against batch norm); the command line that
// fills a RunConfig is app/cli.cpp.
#include "base/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace ddpbench {

int64_t RunConfig::SnapshotEverySteps() const {
  if (snapshot_every.empty() || snapshot_every == "epoch") return 0;
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(snapshot_every, &pos);
  } catch (...) {
    pos = 0;
  }
  if (pos != snapshot_every.size() || v < 1)
    throw ConfigError(fmt::format("--snapshot-every={}: must be a number of steps >= 1 or 'epoch'", snapshot_every));
  return v;
}

int RunConfig::Depth() const {
  static const std::vector<std::string> kModels = {"resnet18", "resnet34", "resnet50", "resnet101",
                                                   "resnet152"};
  if (std::find(kModels.begin(), kModels.end(), model) == kModels.end())
    throw ConfigError(fmt::format("--model={}: not accepted; accepted values: {}", model.empty() ? "''" : model,
                                  fmt::join(kModels, "|")));
  return std::stoi(model.substr(6));
}

int64_t FewestTrainingImages(const RunConfig& c, int64_t image_size) {
  if (c.norm != "batch") return 1;
  int64_t side = image_size;
  for (int halvings = c.small_input ? 3 : 5; halvings > 0; --halvings) side = (side + 1) / 2;
  return side * side >= 2 ? 1 : 2;
}

void CheckMicroBatchImages(const RunConfig& c, int64_t image_size) {
  const int64_t fewest = FewestTrainingImages(c, image_size);
  if (c.batch_size / c.chunks >= fewest) return;
  throw ConfigError(fmt::format("--chunks={}: micro-batches of {} image(s) of --batch-size={}; batch norm (--norm=batch) "
                                "needs at least {} images per device at {} px, where the last stage's map is 1x1; "
                                "accepted: --chunks<={}, or --norm=group", c.chunks, c.batch_size / c.chunks,
                                c.batch_size, fewest, image_size, c.batch_size / fewest));
}

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_=./,:+@%") == std::string::npos)
    return arg;
  std::string quoted = "'";
  for (char c : arg) {
    if (c == '\'') quoted += "'\\''";
    else quoted += c;
  }
  return quoted + "'";
}

int64_t CheckedMilliseconds(const std::string& flag, double seconds) {
  constexpr double kMaxSeconds = 9.0e15;  // 9e18 ms: inside int64 with room for sums
  if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxSeconds)
    throw ConfigError(fmt::format("{}={}: not a duration milliseconds can hold; accepted: a finite number of "
                                  "seconds from 0 to {:.0f}", flag, seconds, kMaxSeconds));
  return static_cast<int64_t>(std::llround(seconds * 1000.0));
}

}  // namespace ddpbench
