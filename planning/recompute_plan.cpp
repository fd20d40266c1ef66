// Which units to recompute (recompute_plan.h).
#include "planning/recompute_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "base/config.h"

namespace ddpbench {

namespace {

bool IsBlock(const std::string& name) { return name != "stem" && name != "head"; }

// "layer3" of "layer3.1" or "layer3.1a".
std::string StageOf(const std::string& name) { return name.substr(0, name.find('.')); }

// A unit's whole block: "layer1.0" of "layer1.0a"; any other unit itself.
std::string BlockOf(const std::string& unit) {
  std::string whole = unit;
  if (IsBlock(unit) && !whole.empty() && (whole.back() == 'a' || whole.back() == 'b')) whole.pop_back();
  return whole;
}

// The whole blocks in order: a half-block model's "layer1.0a" and "layer1.0b" are one block.
std::vector<std::string> BlockNames(const std::vector<std::string>& names) {
  std::vector<std::string> blocks;
  for (const auto& n : names)
    if (IsBlock(n) && (blocks.empty() || blocks.back() != BlockOf(n))) blocks.push_back(BlockOf(n));
  return blocks;
}

// Marks the units `item` names; false when it names none.
bool MarkItem(const std::string& item, const std::vector<std::string>& names, std::vector<bool>* out) {
  const std::vector<std::string> blocks = BlockNames(names);
  std::set<std::string> chosen;  // whole blocks, or unit names
  if (item == "stem" || item == "head") {
    chosen.insert(item);
  } else if (item == "blocks") {
    chosen.insert(blocks.begin(), blocks.end());
  } else if (item.rfind("every-", 0) == 0) {
    int k = 0;
    try {
      size_t used = 0;
      k = std::stoi(item.substr(6), &used);
      if (used != item.size() - 6) k = 0;
    } catch (const std::exception&) {
      k = 0;
    }
    if (k < 1) return false;
    for (size_t b = static_cast<size_t>(k) - 1; b < blocks.size(); b += static_cast<size_t>(k)) chosen.insert(blocks[b]);
  } else {
    for (const auto& n : names)
      if (n == item || BlockOf(n) == item || (IsBlock(n) && StageOf(n) == item)) chosen.insert(n);
  }
  bool any = false;
  for (size_t u = 0; u < names.size(); ++u)
    if (chosen.count(names[u]) || chosen.count(BlockOf(names[u]))) (*out)[u] = true, any = true;
  return any;
}

}  // namespace

std::vector<bool> ParseRecompute(const std::string& spec, const std::vector<std::string>& unit_names) {
  std::vector<bool> out(unit_names.size(), false);
  if (spec == "none") return out;
  if (spec == "all") return std::vector<bool>(unit_names.size(), true);
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, comma - start);
    if (item.empty() || !MarkItem(item, unit_names, &out))
      throw ConfigError(fmt::format(
          "--recompute={}: '{}' names no unit of this model; accepted: none, all, auto, or a comma list of "
          "stem, head, blocks, layer1..layer4, every-K (every K-th block), or unit names ({} .. {})",
          spec, item, unit_names.size() > 1 ? unit_names[1] : "", unit_names.size() > 1 ? unit_names[unit_names.size() - 2] : ""));
    start = comma + 1;
  }
  return out;
}

std::string DescribeRecompute(const std::vector<bool>& recompute, const std::vector<std::string>& unit_names) {
  const auto n = static_cast<size_t>(std::count(recompute.begin(), recompute.end(), true));
  if (n == 0) return "none";
  if (n == recompute.size()) return "all";
  std::string out;
  for (size_t u = 0; u < recompute.size(); ++u)
    if (recompute[u]) out += (out.empty() ? "" : ";") + unit_names[u];
  return out;
}

double RecomputePeakBytes(const std::vector<UnitActivation>& units, const std::vector<bool>& recompute) {
  double held = 0, transient = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const bool r = u < recompute.size() && recompute[u];
    held += r ? units[u].output_bytes : units[u].kept_bytes;
    if (r) transient = std::max(transient, units[u].kept_bytes - units[u].output_bytes);
  }
  return held + transient;
}

RecomputePlan PlanRecompute(const std::vector<UnitActivation>& units, double budget_bytes, double granule_bytes) {
  const size_t n = units.size();
  const double g = granule_bytes > 0 ? granule_bytes : std::max(65536.0, budget_bytes / 4096);
  auto granules = [g](double bytes) { return static_cast<int64_t>(std::ceil(std::max(0.0, bytes) / g - 1e-9)); };
  const int64_t budget = static_cast<int64_t>(std::floor(budget_bytes / g + 1e-9));
  std::vector<int64_t> kept(n), out(n), extra(n);
  for (size_t u = 0; u < n; ++u) {
    kept[u] = granules(units[u].kept_bytes);
    out[u] = std::min(kept[u], granules(units[u].output_bytes));
    extra[u] = kept[u] - out[u];
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  RecomputePlan best;
  double best_time = kInf;
  int64_t best_mem = 0;
  std::set<int64_t> thresholds(extra.begin(), extra.end());
  thresholds.insert(0);
  for (int64_t h : thresholds) {  // the largest transient allowed: units above it are kept
    const int64_t cap = budget - h;
    if (cap < 0) continue;
    // time[u][m]: least added ms over the first u units holding exactly m granules.
    std::vector<std::vector<double>> time(n + 1, std::vector<double>(static_cast<size_t>(cap) + 1, kInf));
    time[0][0] = 0;
    for (size_t u = 0; u < n; ++u)
      for (int64_t m = 0; m <= cap; ++m) {
        const double t = time[u][static_cast<size_t>(m)];
        if (t == kInf) continue;
        if (m + kept[u] <= cap) {
          double& keep = time[u + 1][static_cast<size_t>(m + kept[u])];
          keep = std::min(keep, t);
        }
        if (extra[u] <= h && m + out[u] <= cap) {
          double& redo = time[u + 1][static_cast<size_t>(m + out[u])];
          redo = std::min(redo, t + units[u].forward_ms);
        }
      }
    for (int64_t m = 0; m <= cap; ++m) {
      const double t = time[n][static_cast<size_t>(m)];
      if (t == kInf || t > best_time || (t == best_time && m + h >= best_mem)) continue;
      // Walk back: a unit was recomputed where keeping it cannot explain the time.
      std::vector<bool> r(n, false);
      int64_t left = m;
      double want = t;
      for (size_t u = n; u-- > 0;) {
        const int64_t k = left - kept[u];
        if (k >= 0 && time[u][static_cast<size_t>(k)] == want) {
          left = k;
        } else {
          r[u] = true;
          left -= out[u];
          want = time[u][static_cast<size_t>(left)];  // the value the step came from, exactly
        }
      }
      best_time = t, best_mem = m + h;
      best.fits = true, best.recompute = r;
    }
  }
  if (!best.fits) best.recompute.assign(n, true);
  best.added_ms = 0;
  for (size_t u = 0; u < n; ++u)
    if (best.recompute[u]) best.added_ms += units[u].forward_ms;
  best.peak_bytes = RecomputePeakBytes(units, best.recompute);
  return best;
}

}  // namespace ddpbench
