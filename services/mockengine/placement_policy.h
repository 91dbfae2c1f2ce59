// PlacementPolicy: which source (worker, dp rank) of a request's model serves
// it. README.md ("Placement policies") documents the costs:
//   round-robin  per model, in source order (the former fixed behaviour)
//   least-loaded fewest in-flight requests; ties: in turn (a rotating start
//                per model)
//   random       uniform, seeded
//   kv-aware     lowest cost from the router's /v1/match answer:
//                  cost = prompt_blocks - (device + 0.5 host + 0.25 disk)
//                         + load_weight * in_flight * prompt_blocks
//                (blocks still to prefill, plus the queue in prompt-sized
//                units); ties: fewer in flight, then in turn. No answer:
//                least-loaded. load_weight 0 = matched blocks only.
//   epp          the router's endpoint picker chose the engine (the caller
//                passes that worker's ranks: the least loaded of them);
//                no pick: least-loaded over all
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "shared/index/index_types.h"

namespace kvindex::mockengine {

enum class Policy : uint8_t { kRoundRobin, kKvAware, kRandom, kLeastLoaded, kEpp };
std::optional<Policy> PolicyFromName(std::string_view name);
std::string_view PolicyName(Policy policy);

struct Candidate {
  SourceKey key;
  uint32_t in_flight = 0;
};

// The kv-aware score of one row of a /v1/match answer.
double KvScore(const index::WorkerMatch& match);

class PlacementPolicy {
 public:
  PlacementPolicy(Policy policy, uint64_t seed, size_t models, double load_weight = 0.25);

  Policy policy() const { return policy_; }
  // Index into `candidates` (non-empty, in source order). `match`: the
  // router's answer for kv-aware (nullptr = the match failed: least-loaded).
  // `prompt_blocks`: full blocks of the request's prompt (kv-aware cost).
  size_t Place(size_t model, std::span<const Candidate> candidates, const index::MatchResult* match,
               uint32_t prompt_blocks = 0);

 private:
  Policy policy_;
  double load_weight_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> next_;  // round-robin position / tie-break start per model
  std::vector<double> scores_;  // scratch
};

// Fewest in flight; ties: the first from candidates[first % size] on.
size_t LeastLoaded(std::span<const Candidate> candidates, size_t first = 0);

}  // namespace kvindex::mockengine
