// ddpbench --search=PROFILE: what to run, by the model. Every configuration
// of a search space (strategy, batch per device, bucket size, pipeline
// schedule and micro-batches, recompute, replication) is predicted by the
// step model from a calibration profile, those whose memory does not fit the
// device are set aside, and the rest are ranked by predicted img/s, the
// strategies whose model was checked against measured runs first (a
// strategy never validated is labelled so and never ranked above one that
// was). scripts/search.py measures the first few of this ranking (or all of
// it) in interleaved rounds and reports how right it was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/results.h"
#include "projection/profile.h"
#include "projection/step_model.h"

namespace ddpbench {

struct RunConfig;

// The knobs searched, each a list of values; every combination a strategy
// reads is one candidate (a strategy that does not read a knob takes its
// first value only once).
struct SearchSpace {
  std::vector<std::string> strategies;
  std::vector<int64_t> batches;      // per device (a pipeline runs batch x its stages)
  std::vector<double> bucket_caps_mb;
  std::vector<std::string> schedules;
  std::vector<int> chunks;           // micro-batches; 0: the schedule's default
  std::vector<std::string> recompute;  // none|all
  std::vector<int> replicas;         // --replicate-degree of the strategies that read it
};

// --search-space="strategies=ddp,zero2;batch=16,32;bucket=5,25;schedule=1f1b;chunks=4,8;
// recompute=none,all;replicate=1,2": the keys given replace `defaults`'.
// ConfigError naming the bad key or value and what is accepted.
SearchSpace ParseSearchSpace(const std::string& spec, SearchSpace defaults);

struct Candidate {
  std::string entry;               // ddp:b16:cap25: unique, a --entry label
  std::string strategy;
  std::vector<std::string> flags;  // --strategy=... --gpus=... and the knobs it sets
  int64_t batch_per_device = 0, global_batch = 0;
  bool recompute = false;
  StepQuery query;
  StepPrediction predicted;
  double error_pct = -1;           // the family's validated error; < 0: never validated
  bool fits = false;
  int rank = 0;                    // 1.. among the fitting ones; 0: set aside
  std::string note;                // why it was set aside, or what its label means
};

// Every combination of `space` on `topology`, before prediction.
std::vector<Candidate> EnumerateCandidates(const SearchSpace& space, const Topology& topology);

// Predicts each candidate (recompute: every unit's forward run again inside
// its backward, and the recomputed memory), drops the ones the model cannot
// run (ConfigError: a micro-batch count the batch cannot take, ...), marks
// whether each fits `memory_limit_mb` (0: no limit), and ranks: fitting
// first, validated before not, then by predicted img/s. ConfigError when
// nothing is left, or when nothing fits (naming the closest candidate and
// the memory it needs).
std::vector<Candidate> RankCandidates(const Profile& profile, std::vector<Candidate> candidates,
                                      double memory_limit_mb);

// The CSV's columns, in order (scripts/search.py reads them).
const std::vector<std::string>& SearchColumns();
std::vector<Row> SearchRows(const std::vector<Candidate>& ranked);

// --search: reads and checks the profile, ranks, prints, writes --search-csv.
int RunSearch(const RunConfig& config);

}  // namespace ddpbench
