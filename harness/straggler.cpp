// Straggler attribution (straggler.h): match every rank's entries of the same
// collective, measure each rank's lateness against the others', and read the
// late rank's phases between its last on-time collective and its first late one.
#include "harness/straggler.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace ddpbench {
namespace {

constexpr double kNoiseFraction = 0.05;  // of the step: lateness below this is not named
constexpr double kNoiseFloorMs = 1.0;
constexpr Phase kPhases[] = {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kOptimizer};

// One collective as every rank knows it: its group's name and its place in
// the group's order; send/recv by channel (source, destination, tag).
struct Key {
  std::string group;
  int src = -1, dst = -1, tag = 0;
  uint64_t seq = 0;
  bool operator<(const Key& o) const {
    return std::tie(group, src, dst, tag, seq) < std::tie(o.group, o.src, o.dst, o.tag, o.seq);
  }
};

struct Arrival {
  int rank = 0;
  int64_t ns = 0;
  int64_t step = 0;
  int64_t end_ns = -1;  // when it ended on this rank (-1: not seen)
};

// A matched entry from one rank's side: its lateness against the others.
struct Item {
  int64_t step = 0;
  double late_ms = 0;
  double wait_ms = 0;  // until the last of the others entered
  const std::vector<Arrival>* all = nullptr;
  int64_t ns = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Key KeyOf(const flight::Record& r, const flight::Entry& e) {
  Key k{r.groups.at(e.group).name, -1, -1, 0, e.seq};
  if (e.peer >= 0) {
    const bool sending = e.op == "send";
    k.src = sending ? r.rank : e.peer;
    k.dst = sending ? e.peer : r.rank;
    k.tag = e.tag;
  }
  return k;
}

size_t Expected(const flight::Record& r, const flight::Entry& e) {
  return e.peer >= 0 ? 2 : r.groups.at(e.group).ranks.size();
}

// Every collective entered by all its members in the timed steps.
std::map<Key, std::vector<Arrival>> Match(const std::vector<flight::Record>& records) {
  std::map<Key, std::vector<Arrival>> keys;
  std::map<Key, size_t> expected;
  for (const auto& r : records)
    for (const flight::Entry& e : r.entries) {
      if (e.step < 1) continue;
      const Key k = KeyOf(r, e);
      // A receive posted ahead is needed when the rank waits for it.
      const int64_t ready = e.op == "recv" && e.waited_ns >= 0 ? e.waited_ns : e.entered_ns;
      keys[k].push_back({r.rank, ready, e.step, e.ended_ns});
      expected[k] = Expected(r, e);
    }
  for (auto it = keys.begin(); it != keys.end();)
    it = it->second.size() == expected[it->first] && it->second.size() >= 2 ? std::next(it) : keys.erase(it);
  return keys;
}

// Each rank's matched entries, in the order it was ready for them.
std::map<int, std::vector<Item>> Items(const std::map<Key, std::vector<Arrival>>& keys) {
  std::map<int, std::vector<Item>> out;
  for (const auto& [key, arrivals] : keys) {
    int64_t last = arrivals.front().ns;
    for (const Arrival& a : arrivals) last = std::max(last, a.ns);
    for (const Arrival& a : arrivals) {
      std::vector<double> others;
      for (const Arrival& o : arrivals)
        if (&o != &a) others.push_back(static_cast<double>(o.ns));
      out[a.rank].push_back({a.step, (static_cast<double>(a.ns) - Median(others)) / 1e6,
                             static_cast<double>(last - a.ns) / 1e6, &arrivals, a.ns});
    }
  }
  for (auto& [rank, items] : out)
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.ns < b.ns; });
  return out;
}

// The largest lateness (and wait) of each step, per rank.
std::map<int64_t, std::pair<double, double>> PerStep(const std::vector<Item>& items) {
  std::map<int64_t, std::pair<double, double>> steps;
  for (const Item& i : items) {
    auto [it, fresh] = steps.try_emplace(i.step, i.late_ms, i.wait_ms);
    if (!fresh) it->second = {std::max(it->second.first, i.late_ms), std::max(it->second.second, i.wait_ms)};
  }
  return steps;
}

double PhaseMsIn(const flight::Record& r, Phase p, int64_t from, int64_t to) {
  double ms = 0;
  for (const flight::PhaseSpan& s : r.spans)
    if (s.phase == p) ms += static_cast<double>(std::max<int64_t>(0, std::min(s.end_ns, to) - std::max(s.start_ns, from)));
  return ms / 1e6;
}

const Arrival* Of(const std::vector<Arrival>& arrivals, int rank) {
  for (const Arrival& a : arrivals)
    if (a.rank == rank) return &a;
  return nullptr;
}

// Where a rank turned late: the indices of its items late (at least half its
// step's lateness, in a step above the line) right after one on time.
std::vector<size_t> TurnsLate(const std::vector<Item>& items, double noise_ms) {
  std::vector<size_t> out;
  const auto steps = PerStep(items);
  for (size_t i = 1; i < items.size(); ++i) {
    const double step_late = steps.at(items[i].step).first;
    if (step_late >= noise_ms && items[i].late_ms >= step_late / 2 && items[i - 1].late_ms < step_late / 2)
      out.push_back(i);
  }
  return out;
}

// Why a late rank was late, when not from its own work: it waited, just
// before, for another rank (a replica waiting in its shard group is late for
// the replicate all-reduce): that rank (>= 0); or its previous collective
// ended later on it than on the others (a slow link): kByLink; else -1.
constexpr int kByLink = -2;
int Inherited(const std::vector<Item>& items, int rank, double noise_ms) {
  std::map<int, int> votes;
  const auto turns = TurnsLate(items, noise_ms);
  for (size_t i : turns) {
    const Item& prev = items[i - 1];
    const double late = items[i].late_ms;
    const Arrival* mine = Of(*prev.all, rank);
    std::vector<double> ends;
    for (const Arrival& a : *prev.all)
      if (a.rank != rank && a.end_ns >= 0) ends.push_back(static_cast<double>(a.end_ns));
    if (prev.wait_ms >= late / 2) {
      const auto last = std::max_element(prev.all->begin(), prev.all->end(),
                                         [](const Arrival& a, const Arrival& b) { return a.ns < b.ns; });
      ++votes[last->rank];
    } else if (mine && mine->end_ns >= 0 && !ends.empty() &&
               (static_cast<double>(mine->end_ns) - Median(ends)) / 1e6 >= late / 2) {
      ++votes[kByLink];
    }
  }
  for (const auto& [who, n] : votes)
    if (2 * static_cast<size_t>(n) > turns.size()) return who;
  return -1;
}

// The phase the late rank spent longer in than the others, summed over the
// steps it was late in: between the last collective it entered before its
// first late one, and that late one.
std::string LatePhase(const std::map<int, const flight::Record*>& by_rank, const std::vector<Item>& items,
                      int rank, double noise_ms) {
  std::map<Phase, double> excess;
  for (size_t i : TurnsLate(items, noise_ms)) {
    const Item& prev = items[i - 1];
    const Item& late = items[i];
    for (Phase p : kPhases) {
      std::vector<double> others;
      for (const Arrival& o : *late.all) {
        const Arrival* o_prev = Of(*prev.all, o.rank);
        if (o.rank == rank || !o_prev) continue;
        others.push_back(PhaseMsIn(*by_rank.at(o.rank), p, o_prev->ns, o.ns));
      }
      if (!others.empty()) excess[p] += PhaseMsIn(*by_rank.at(rank), p, prev.ns, late.ns) - Median(others);
    }
  }
  std::string best;
  double most = 0;
  for (const auto& [p, ms] : excess)
    if (ms > most) {
      most = ms;
      best = PhaseName(p);
    }
  return best;
}

}  // namespace

StragglerFigures AttributeStragglers(const std::vector<flight::Record>& records, int world, double step_ms) {
  StragglerFigures s;
  s.noise_ms = std::max(kNoiseFloorMs, kNoiseFraction * step_ms);
  s.late_per_rank_ms.assign(world, 0);
  s.compute_per_rank_ms.assign(world, step_ms);
  const auto keys = Match(records);
  if (keys.empty()) return s;
  s.measured = true;
  const auto items = Items(keys);
  std::set<int64_t> all_steps;
  for (const auto& [rank, list] : items) {
    if (rank < 0 || rank >= world) continue;
    const auto steps = PerStep(list);
    double late = 0, wait = 0;
    for (const auto& [step, lw] : steps) {
      late += std::max(0.0, lw.first);
      wait += lw.second;
      all_steps.insert(step);
    }
    s.late_per_rank_ms[rank] = late / static_cast<double>(steps.size());
    s.compute_per_rank_ms[rank] = std::max(0.0, step_ms - wait / static_cast<double>(steps.size()));
  }
  s.steps = static_cast<int64_t>(all_steps.size());
  s.latest_rank = static_cast<int>(std::max_element(s.late_per_rank_ms.begin(), s.late_per_rank_ms.end()) -
                                   s.late_per_rank_ms.begin());
  s.late_ms = s.late_per_rank_ms[s.latest_rank];
  // Every rank is a little late now and then (the OS, the other ranks'
  // threads): the line is above the others' own lateness.
  std::vector<double> others;
  for (int r = 0; r < world; ++r)
    if (r != s.latest_rank) others.push_back(s.late_per_rank_ms[r]);
  s.noise_ms += others.empty() ? 0 : Median(others);
  if (s.late_ms < s.noise_ms) return s;
  // Follow the blame: a rank late only because it waited for another one.
  int rank = s.latest_rank;
  for (int hop = 0; hop < world; ++hop) {
    const int why = Inherited(items.at(rank), rank, s.noise_ms);
    if (why == kByLink) {
      s.phase = "communication";  // no rank's own work: its collectives ended later on it
      return s;
    }
    if (why < 0 || why == rank || !items.count(why)) break;
    rank = why;
  }
  s.rank = rank;
  s.late_ms = s.late_per_rank_ms[rank];
  std::map<int, const flight::Record*> by_rank;
  for (const auto& r : records) by_rank[r.rank] = &r;
  s.phase = LatePhase(by_rank, items.at(s.rank), s.rank, s.noise_ms);
  return s;
}

std::string DescribeStraggler(const StragglerFigures& s) {
  if (s.measured && s.rank < 0 && s.phase == "communication")
    return fmt::format("no rank was slow: rank {} was {:.1f} ms late per step because its collectives ended later "
                       "on it (a slow link or transport), not from its own work", s.latest_rank, s.late_ms);
  if (!s.measured || s.rank < 0) return "";
  std::string compute;
  for (size_t r = 0; r < s.compute_per_rank_ms.size(); ++r)
    compute += fmt::format("{}rank {} {:.1f}", r ? ", " : "", r, s.compute_per_rank_ms[r]);
  return fmt::format("rank {} was {:.1f} ms late per step{} (noise line {:.1f} ms, {} steps); each rank's step "
                     "net of waiting: {} ms",
                     s.rank, s.late_ms, s.phase.empty() ? "" : ", from its " + s.phase + " phase", s.noise_ms,
                     s.steps, compute);
}

}  // namespace ddpbench
