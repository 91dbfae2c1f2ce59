#include "services/mockengine/placement_policy.h"

namespace kvindex::mockengine {

std::optional<Policy> PolicyFromName(std::string_view name) {
  if (name == "round-robin") return Policy::kRoundRobin;
  if (name == "kv-aware") return Policy::kKvAware;
  if (name == "random") return Policy::kRandom;
  if (name == "least-loaded") return Policy::kLeastLoaded;
  if (name == "epp") return Policy::kEpp;
  return std::nullopt;
}

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kRoundRobin:
      return "round-robin";
    case Policy::kKvAware:
      return "kv-aware";
    case Policy::kRandom:
      return "random";
    case Policy::kLeastLoaded:
      return "least-loaded";
    case Policy::kEpp:
      return "epp";
  }
  return "?";
}

double KvScore(const index::WorkerMatch& match) {
  // A host or disk hit still saves prefill but costs a load back to the GPU.
  return match.device + 0.5 * match.host + 0.25 * match.disk;
}

size_t LeastLoaded(std::span<const Candidate> candidates, size_t first) {
  size_t best = first % candidates.size();
  for (size_t step = 1; step < candidates.size(); ++step) {
    const size_t i = (first + step) % candidates.size();
    if (candidates[i].in_flight < candidates[best].in_flight) best = i;
  }
  return best;
}

PlacementPolicy::PlacementPolicy(Policy policy, uint64_t seed, size_t models, double load_weight)
    : policy_(policy), load_weight_(load_weight), rng_(seed), next_(models, 0) {}

size_t PlacementPolicy::Place(size_t model, std::span<const Candidate> candidates,
                              const index::MatchResult* match, uint32_t prompt_blocks) {
  switch (policy_) {
    case Policy::kRoundRobin:
      return next_[model]++ % candidates.size();
    case Policy::kRandom:
      return std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_);
    case Policy::kLeastLoaded:
    case Policy::kEpp:
      return LeastLoaded(candidates, next_[model]++);
    case Policy::kKvAware:
      break;
  }
  // Full ties are broken in turn from a rotating start: with lowest-index
  // ties, an idle fleet sent every new conversation to the first worker.
  const size_t first = next_[model]++ % candidates.size();
  if (match == nullptr) return LeastLoaded(candidates, first);
  scores_.assign(candidates.size(), 0.0);
  for (const index::WorkerMatch& row : match->workers) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i].key == row.source) scores_[i] = KvScore(row);
    }
  }
  // Matched blocks alone make the first holder of a shared prefix win every
  // request (all load on one worker); the load term prices its queue.
  const double blocks = prompt_blocks;
  for (size_t i = 0; i < candidates.size(); ++i) {
    scores_[i] = blocks - scores_[i] + load_weight_ * candidates[i].in_flight * blocks;
  }
  size_t best = first;
  for (size_t step = 1; step < candidates.size(); ++step) {
    const size_t i = (first + step) % candidates.size();
    if (scores_[i] < scores_[best] ||
        (scores_[i] == scores_[best] && candidates[i].in_flight < candidates[best].in_flight)) {
      best = i;
    }
  }
  return best;
}

}  // namespace kvindex::mockengine
