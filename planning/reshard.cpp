// See reshard.h. The old pieces are indexed by logical name; a wanted piece
// is covered left to right, at each element by the preferred rank's piece
// holding it, else the lowest rank's, for as far as that piece reaches.
#include "planning/reshard.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace ddpbench {
namespace {

// The old pieces of one logical tensor in the order they are preferred.
std::vector<const ShardPiece*> Candidates(const std::vector<const ShardPiece*>& of_tensor, int prefer) {
  std::vector<const ShardPiece*> c = of_tensor;
  std::stable_sort(c.begin(), c.end(), [prefer](const ShardPiece* a, const ShardPiece* b) {
    if ((a->holder == prefer) != (b->holder == prefer)) return a->holder == prefer;
    return a->holder < b->holder;
  });
  return c;
}

// Appends the copies filling `w` from `candidates`, element `at` onwards.
void Cover(const ShardPiece& w, const std::vector<const ShardPiece*>& candidates, std::vector<SliceCopy>* out) {
  int64_t at = w.begin;
  const int64_t end = w.begin + w.length;
  while (at < end) {
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [at](const ShardPiece* h) { return h->begin <= at && at < h->begin + h->length; });
    if (it == candidates.end())
      throw std::invalid_argument(fmt::format("resharding: element {} of {} is in no stored piece", at, w.logical));
    const ShardPiece& h = **it;
    const int64_t n = std::min(end, h.begin + h.length) - at;
    out->push_back({h.holder, h.stored, h.stored_offset + (at - h.begin), w.stored, w.stored_offset + (at - w.begin), n});
    at += n;
  }
}

}  // namespace

std::vector<SliceCopy> PlanReshard(const std::vector<ShardPiece>& have, const std::vector<ShardPiece>& want,
                                   int prefer) {
  std::map<std::string, std::vector<const ShardPiece*>> by_name;
  for (const auto& h : have) {
    if (h.begin < 0 || h.length < 0 || h.stored_offset < 0)
      throw std::invalid_argument(fmt::format("resharding: a stored piece of {} has a negative range", h.logical));
    by_name[h.logical].push_back(&h);
  }
  std::map<std::string, std::vector<const ShardPiece*>> ordered;
  for (const auto& [name, pieces] : by_name) ordered[name] = Candidates(pieces, prefer);
  std::vector<SliceCopy> copies;
  for (const auto& w : want) {
    auto it = ordered.find(w.logical);
    if (it == ordered.end() && w.length > 0)
      throw std::invalid_argument(fmt::format("resharding: {} is in no stored piece", w.logical));
    if (w.length > 0) Cover(w, it->second, &copies);
  }
  return copies;
}

std::vector<int> HoldersRead(const std::vector<SliceCopy>& copies) {
  std::set<int> holders;
  for (const auto& c : copies) holders.insert(c.holder);
  return {holders.begin(), holders.end()};
}

std::vector<ShardPiece> WholePieces(const std::map<std::string, int64_t>& numels, int holder) {
  std::vector<ShardPiece> pieces;
  for (const auto& [name, numel] : numels) pieces.push_back({name, 0, numel, holder, name, 0});
  return pieces;
}

std::vector<ShardPiece> StagePieces(const std::vector<std::map<std::string, int64_t>>& unit_tensors,
                                    const std::vector<int>& stage_of, int stages, int replicas,
                                    const std::string& stored_prefix) {
  if (stage_of.size() != unit_tensors.size())
    throw std::invalid_argument(fmt::format("resharding: {} units but {} stage assignments", unit_tensors.size(),
                                            stage_of.size()));
  std::vector<ShardPiece> pieces;
  for (int replica = 0; replica < replicas; ++replica)
    for (size_t u = 0; u < unit_tensors.size(); ++u) {
      if (stage_of[u] < 0 || stage_of[u] >= stages)
        throw std::invalid_argument(fmt::format("resharding: unit {} is on stage {} of {}", u, stage_of[u], stages));
      for (const auto& [name, numel] : unit_tensors[u])
        pieces.push_back({name, 0, numel, replica * stages + stage_of[u], stored_prefix + name, 0});
    }
  return pieces;
}

}  // namespace ddpbench
