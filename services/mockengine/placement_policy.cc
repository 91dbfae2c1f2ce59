#include "services/mockengine/placement_policy.h"

namespace kvindex::mockengine {

std::optional<Policy> PolicyFromName(std::string_view name) {
  if (name == "round-robin") return Policy::kRoundRobin;
  if (name == "kv-aware") return Policy::kKvAware;
  if (name == "random") return Policy::kRandom;
  if (name == "least-loaded") return Policy::kLeastLoaded;
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
  }
  return "?";
}

double KvScore(const index::WorkerMatch& match) {
  // A host or disk hit still saves prefill but costs a load back to the GPU.
  return match.device + 0.5 * match.host + 0.25 * match.disk;
}

size_t LeastLoaded(std::span<const Candidate> candidates) {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (candidates[i].in_flight < candidates[best].in_flight) best = i;
  }
  return best;
}

PlacementPolicy::PlacementPolicy(Policy policy, uint64_t seed, size_t models)
    : policy_(policy), rng_(seed), next_(models, 0) {}

size_t PlacementPolicy::Place(size_t model, std::span<const Candidate> candidates,
                              const index::MatchResult* match) {
  switch (policy_) {
    case Policy::kRoundRobin:
      return next_[model]++ % candidates.size();
    case Policy::kRandom:
      return std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_);
    case Policy::kLeastLoaded:
      return LeastLoaded(candidates);
    case Policy::kKvAware:
      break;
  }
  if (match == nullptr) return LeastLoaded(candidates);
  scores_.assign(candidates.size(), 0.0);
  for (const index::WorkerMatch& row : match->workers) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i].key == row.source) scores_[i] = KvScore(row);
    }
  }
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (scores_[i] > scores_[best] ||
        (scores_[i] == scores_[best] && candidates[i].in_flight < candidates[best].in_flight)) {
      best = i;
    }
  }
  return best;
}

}  // namespace kvindex::mockengine
