// --help grouped by topic, one line per flag (see help.h).
#include "app/help.h"

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <sstream>
#include <vector>

namespace ddpbench {
namespace {

// Topics in the order --help prints them; a new flag gets one line here.
const std::vector<std::pair<std::string, std::vector<std::string>>>& Topics() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> topics = {
      {"Run", {"--help", "--strategy", "--list", "--gpus", "--device", "--threads-per-device", "--oversubscribe",
               "--steps", "--epochs", "--warmup", "--repeat", "--seed", "--progress", "--verify", "--verify-steps",
               "--verify-tolerance"}},
      {"Model and data", {"--model", "--width", "--small-input", "--norm", "--dataset", "--data-dir", "--image-size",
                          "--batch-size", "--augment", "--prefetch", "--data-workers", "--skip-bad-images", "--decode", "--data-only", "--num-classes", "--amp", "--optimizer", "--lr",
                          "--lr-scaling", "--momentum", "--weight-decay", "--memory-format", "--optimizer-impl",
                          "--cpu-malloc", "--cpu-device-memory-mb", "--recompute", "--memory-budget-mb"}},
      {"Strategy-specific", {"--bucket-cap-mb", "--grad-accum", "--compression", "--timeout", "--zero-reduce", "--cpu-backend", "--overlap-optimizer",
                             "--gradient-as-bucket-view", "--replicate-degree", "--balance", "--split", "--units", "--chunks", "--schedule", "--virtual-stages",
                             "--fill-waits", "--rebalance", "--shape-trials", "--stage-ranks"}},
      {"Outputs", {"--out", "--baseline", "--trace", "--profile", "--memory-snapshot", "--export", "--run-id", "--entry", "--no-eval", "--eval-batches"}},
      {"Training to an answer", {"--time-budget", "--target-accuracy", "--eval-every", "--val-fraction",
                                 "--snapshot-dir", "--snapshot-every", "--snapshot-keep", "--resume", "--epoch-csv"}},
      {"GPU", {"--tf32", "--cuda-graphs", "--fuse"}},
      {"Projection", {"--calibrate", "--project", "--project-csv", "--strategies", "--nodes", "--gpus-per-node",
                      "--nics-per-node", "--intra", "--inter", "--device-memory-gb", "--device-img-s", "--expected"}},
      {"Search", {"--search", "--search-space", "--search-csv"}},
      {"Faults on purpose", {"--inject", "--flight-recorder"}},
  };
  return topics;
}

constexpr size_t kLineWidth = 120;
constexpr size_t kNameWidth = 36;  // the longest flag with its type and default fits
const char* const kOther = "Other";

// `text` broken at spaces into lines of at most `room` characters (a word
// longer than that stands alone), joined by newlines: CLI11 indents each
// continuation line to the description column.
std::string WrapWords(const std::string& text, size_t room) {
  std::istringstream words(text);
  std::string out, line;
  for (std::string word; words >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > room) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

// Prints the topics in Topics()' order, each description whole, wrapped to
// the line (docs/flags.md has each flag with its examples and figures).
class TopicFormatter : public CLI::Formatter {
 public:
  TopicFormatter() { column_width(kNameWidth); }

  std::string make_option_desc(const CLI::Option* opt) const override {
    return WrapWords(CLI::Formatter::make_option_desc(opt), kLineWidth - kNameWidth - 2);
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode) const override {
    std::stringstream out;
    out << make_description(app) << make_usage(app, name);
    std::vector<std::string> order;
    for (const auto& topic : Topics()) order.push_back(topic.first);
    order.push_back(kOther);
    for (const auto& group : order) {
      auto opts = app->get_options([&](const CLI::Option* o) { return o->get_group() == group; });
      if (!opts.empty()) out << make_group(group, false, opts);
    }
    out << "\nEvery flag in full: docs/flags.md\n";
    return out.str();
  }
};

}  // namespace

std::string HelpGroup(const std::string& flag) {
  for (const auto& [topic, flags] : Topics())
    for (const auto& f : flags)
      if (f == flag) return topic;
  return "";
}

void GroupHelp(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string name = opt == app.get_help_ptr() ? "--help" : opt->get_name();
    const std::string topic = HelpGroup(name);
    opt->group(topic.empty() ? kOther : topic);
  }
  app.formatter(std::make_shared<TopicFormatter>());
}

}  // namespace ddpbench
