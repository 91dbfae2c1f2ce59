// Picker: scores the candidate endpoints of a request and picks the best,
// then the next best N as fallbacks (docs/epp.md, "Scores and the pick").
//
//   score = w_prefix * prefix + w_kv * kv + w_queue * queue
//         + w_inflight * inflight
//   prefix   = sum over tiers of tier_weight * matched blocks in that tier,
//              over the request's blocks (0..1), from the same index lookup
//              as /v1/match (IndexInterface::MatchTokens);
//   kv       = 1 - the engine's KV-cache use (0..1);
//   queue    = (most waiting - waiting) / (most - least waiting) over the
//              candidates that report it (1 when all wait alike);
//   inflight = 1 - picks in flight to the endpoint / the most in flight to
//              any candidate (1 when none is busy).
// kv and queue come from the LoadTable (engines' /metrics): a candidate
// without a fresh sample scores 0 on both; one whose engine is unhealthy, or
// whose queue is at max_queue_per_endpoint, is not picked.
// Ties (equal scores) go to the candidate with the highest
// hash(seed, request key, address): random across requests, the same on
// every replica for the same request and seed.
//
// Thread safety: Pick and Release from any thread; the configuration is
// immutable; in-flight counts are atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/epp/endpoints.h"
#include "shared/epp/load_table.h"
#include "shared/epp/speculative.h"
#include "shared/index/index_interface.h"

namespace kvindex::epp {

struct ModelAlias {
  std::string model;  // the index's model
  std::string lora;   // a LoRA adapter's name ("" = base model)
};

struct PickerConfig {
  double prefix_weight = 2.0;
  double kv_cache_weight = 1.0;
  double queue_weight = 1.0;
  double inflight_weight = 1.0;
  // Per tier: device, host, disk, external.
  double tier_weights[4] = {1.0, 0.8, 0.5, 0.3};
  uint64_t seed = 0;
  // Fallback endpoints after the pick. Default: 2.
  uint32_t fallbacks = 2;
  // Shedding: an endpoint with this many picks in flight is not picked; all
  // of them full -> ResourceExhausted (429). 0 = no limit. Default: 0.
  uint32_t max_inflight_per_endpoint = 0;
  // Shedding on the engine's queue: an endpoint whose fresh sample reports
  // this many waiting requests is not picked; all of them full -> 429.
  // 0 = no limit. Default: 0.
  uint32_t max_queue_per_endpoint = 0;
  // Request model -> index model (and LoRA adapter).
  absl::flat_hash_map<std::string, ModelAlias> aliases;
  // Predict on route (speculative.h): ttl 0 = off. Default: 2 s.
  SpeculativeOptions speculative;
};

// The YAML config (docs/epp.md):
//   scorers: {prefix: 2, kv_cache: 1, queue: 1, inflight: 1}
//   tiers: {device: 1.0, host: 0.8, disk: 0.5, external: 0.3}
//   seed: 0
//   fallbacks: 2
//   max_inflight_per_endpoint: 0
//   max_queue_per_endpoint: 0
//   models: {alias-name: {model: M, lora: adapter}}
//   speculative: {ttl_ms: 2000, max_entries: 1000000}
StatusOr<PickerConfig> ParsePickerConfig(const std::string& yaml_text);

struct PickInput {
  std::string_view model;                         // as in the request; "" = unknown (any endpoint)
  const std::vector<uint32_t>* tokens = nullptr;  // null: load-only pick
  std::string_view cache_salt;
  // The subset hint: null = none; else only these addresses ("ip:port", or
  // "ip" for any port of that host).
  const std::vector<std::string>* subset = nullptr;
};

struct PickResult {
  // The pick, then the fallbacks (addresses).
  std::vector<std::string> endpoints;
  uint32_t request_blocks = 0;  // the request's full blocks (0: load-only)
  uint32_t matched_blocks = 0;  // the pick's matched prefix blocks
  bool prefix_scored = false;   // the index answered for the request's tokens
  // Of the pick's prefix, blocks only speculative entries held (0: none).
  uint32_t speculative_blocks = 0;
};

class Picker {
 public:
  // `load` (nullable: no load signals) must outlive the picker.
  Picker(PickerConfig config, const index::IndexInterface* index, EndpointTable* endpoints,
         const LoadTable* load = nullptr);

  // Unavailable: no endpoint eligible (none for the model, the subset
  // leaves none, or every engine left is unhealthy). ResourceExhausted:
  // every eligible endpoint is at max_inflight_per_endpoint picks in flight
  // or max_queue_per_endpoint waiting (shed). On success the pick counts as in flight until
  // Release.
  StatusOr<PickResult> Pick(const PickInput& input);
  void Release(const std::string& address);

  // Picks in flight to `address` (tests).
  int64_t InFlight(const std::string& address) const;
  const PickerConfig& config() const { return config_; }
  // Predict on route: score with, and record picks into, `cache` (null =
  // off). Set before the first Pick.
  void SetSpeculative(SpeculativeCache* cache) { speculative_ = cache; }

 private:
  std::atomic<int64_t>* Counter(const std::string& address);

  const PickerConfig config_;
  const index::IndexInterface* const index_;
  EndpointTable* const endpoints_;
  const LoadTable* const load_;
  SpeculativeCache* speculative_ = nullptr;
  std::atomic<uint64_t> load_only_counter_{0};
  mutable SharedMutex inflight_mu_;
  // Counters are never erased, so a pointer stays valid.
  absl::flat_hash_map<std::string, std::unique_ptr<std::atomic<int64_t>>> inflight_
      ABSL_GUARDED_BY(inflight_mu_);
};

}  // namespace kvindex::epp
