#include "shared/epp/picker.h"

#include <xxhash.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <span>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

#include "shared/hashing/canonical_hash.h"

namespace kvindex::epp {
namespace {

uint64_t TieKey(uint64_t seed, uint64_t request_key, std::string_view address) {
  return XXH3_64bits_withSeed(address.data(), address.size(), seed ^ request_key);
}

bool InSubset(const std::vector<std::string>& subset, std::string_view address) {
  const std::string_view host = address.substr(0, address.rfind(':'));
  for (const std::string& entry : subset) {
    if (entry == address || entry == host) return true;
  }
  return false;
}

}  // namespace

StatusOr<PickerConfig> ParsePickerConfig(const std::string& yaml_text) {
  PickerConfig config;
  auto invalid = [](const std::string& what) {
    return absl::InvalidArgumentError("epp config: " + what);
  };
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (root.IsNull()) return config;
    if (!root.IsMap()) return invalid("expected a map");
    for (const auto& item : root) {
      const std::string key = item.first.as<std::string>();
      const YAML::Node value = item.second;
      if (key == "scorers") {
        for (const auto& s : value) {
          const std::string name = s.first.as<std::string>();
          const double w = s.second.as<double>();
          if (w < 0) return invalid("scorer weight '" + name + "' is negative");
          if (name == "prefix") {
            config.prefix_weight = w;
          } else if (name == "kv_cache") {
            config.kv_cache_weight = w;
          } else if (name == "queue") {
            config.queue_weight = w;
          } else if (name == "inflight") {
            config.inflight_weight = w;
          } else {
            return invalid("unknown scorer '" + name + "' (prefix, kv_cache, queue, inflight)");
          }
        }
      } else if (key == "tiers") {
        for (const auto& t : value) {
          const std::string name = t.first.as<std::string>();
          const std::optional<Tier> tier = TierFromName(name);
          if (!tier) return invalid("unknown tier '" + name + "'");
          config.tier_weights[static_cast<int>(*tier)] = t.second.as<double>();
        }
      } else if (key == "seed") {
        config.seed = value.as<uint64_t>();
      } else if (key == "fallbacks") {
        config.fallbacks = value.as<uint32_t>();
      } else if (key == "max_inflight_per_endpoint") {
        config.max_inflight_per_endpoint = value.as<uint32_t>();
      } else if (key == "max_queue_per_endpoint") {
        config.max_queue_per_endpoint = value.as<uint32_t>();
      } else if (key == "speculative") {
        if (value["ttl_ms"]) {
          config.speculative.ttl = std::chrono::milliseconds(value["ttl_ms"].as<uint32_t>());
        }
        if (value["max_entries"])
          config.speculative.max_entries = value["max_entries"].as<size_t>();
      } else if (key == "models") {
        for (const auto& m : value) {
          ModelAlias alias;
          alias.model = m.second["model"].as<std::string>();
          if (m.second["lora"]) alias.lora = m.second["lora"].as<std::string>();
          config.aliases[m.first.as<std::string>()] = std::move(alias);
        }
      } else {
        return invalid("unknown key '" + key +
                       "' (scorers, tiers, seed, fallbacks, max_inflight_per_endpoint, "
                       "max_queue_per_endpoint, models, speculative)");
      }
    }
  } catch (const YAML::Exception& e) {
    return invalid(e.what());
  }
  return config;
}

Picker::Picker(PickerConfig config, const index::IndexInterface* index, EndpointTable* endpoints,
               const LoadTable* load)
    : config_(std::move(config)), index_(index), endpoints_(endpoints), load_(load) {}

std::atomic<int64_t>* Picker::Counter(const std::string& address) {
  {
    ReaderLock lock(&inflight_mu_);
    if (auto it = inflight_.find(address); it != inflight_.end()) return it->second.get();
  }
  WriterLock lock(&inflight_mu_);
  auto& slot = inflight_[address];
  if (!slot) slot = std::make_unique<std::atomic<int64_t>>(0);
  return slot.get();
}

int64_t Picker::InFlight(const std::string& address) const {
  ReaderLock lock(&inflight_mu_);
  auto it = inflight_.find(address);
  return it == inflight_.end() ? 0 : it->second->load();
}

void Picker::Release(const std::string& address) {
  Counter(address)->fetch_sub(1, std::memory_order_relaxed);
}

StatusOr<PickResult> Picker::Pick(const PickInput& input) {
  endpoints_->MaybeReload();
  const std::shared_ptr<const EndpointSet> set = endpoints_->Snapshot();
  std::string_view model = input.model;
  std::string_view lora;
  if (auto it = config_.aliases.find(absl::string_view(input.model.data(), input.model.size()));
      it != config_.aliases.end()) {
    model = it->second.model;
    lora = it->second.lora;
  }

  struct Candidate {
    const Endpoint* endpoint = nullptr;  // into set->endpoints
    std::atomic<int64_t>* inflight = nullptr;
    double prefix = 0;
    uint32_t matched = 0;
    codec::EngineLoad load;    // -1s: no fresh sample
    uint32_t speculative = 0;  // blocks past `matched` only speculation holds
    double score = 0;
    uint64_t tie = 0;
  };
  thread_local std::vector<Candidate> candidates;
  candidates.clear();
  for (const Endpoint& endpoint : set->endpoints) {
    if (!model.empty() && !endpoint.model.empty() && endpoint.model != model) continue;
    if (input.subset != nullptr && !InSubset(*input.subset, endpoint.address)) continue;
    candidates.emplace_back().endpoint = &endpoint;
  }
  {
    // The in-flight counters under one lock for all candidates, not one each.
    ReaderLock lock(&inflight_mu_);
    for (Candidate& c : candidates) {
      if (auto it = inflight_.find(c.endpoint->address); it != inflight_.end()) {
        c.inflight = it->second.get();
      }
    }
  }
  for (Candidate& c : candidates) {
    if (c.inflight == nullptr) c.inflight = Counter(c.endpoint->address);
  }
  if (candidates.empty()) {
    return absl::UnavailableError(
        input.subset != nullptr ? "no eligible endpoint in the subset hint"
                                : "no eligible endpoint for model '" + std::string(model) + "'");
  }
  if (load_ != nullptr) {
    const auto now = LoadTable::Clock::now();
    load_->FreshEach(
        candidates.size(),
        [&](size_t i) -> const SourceKey& { return candidates[i].endpoint->source; }, now,
        [&](size_t i, const codec::EngineLoad& load) { candidates[i].load = load; });
    std::erase_if(candidates, [](const Candidate& c) { return !c.load.healthy; });
    if (candidates.empty()) return absl::UnavailableError("every eligible engine is unhealthy");
  }
  if (config_.max_inflight_per_endpoint > 0 || config_.max_queue_per_endpoint > 0) {
    const auto limit = static_cast<int64_t>(config_.max_inflight_per_endpoint);
    const double queue_limit = config_.max_queue_per_endpoint;
    std::erase_if(candidates, [limit, queue_limit](const Candidate& c) {
      return (limit > 0 && c.inflight->load(std::memory_order_relaxed) >= limit) ||
             (queue_limit > 0 && c.load.waiting >= queue_limit);
    });
    if (candidates.empty()) {
      return absl::ResourceExhaustedError(
          "every eligible endpoint is at its in-flight or queue limit");
    }
  }

  // Candidates by source, for the index's and the speculative cache's rows:
  // the endpoint set's source -> endpoints chain (one hash lookup per row,
  // nothing hashed per candidate), each endpoint mapped to its candidate
  // once the candidates left out above are gone.
  thread_local std::vector<uint32_t> candidate_of;
  candidate_of.assign(set->endpoints.size(), UINT32_MAX);
  for (uint32_t i = 0; i < candidates.size(); ++i) {
    candidate_of[static_cast<size_t>(candidates[i].endpoint - set->endpoints.data())] = i;
  }
  // Calls f(candidate) for every candidate of `source`, in candidate order.
  auto for_source = [&](const SourceKey& source, auto f) {
    auto it = set->by_source.find(source);
    if (it == set->by_source.end()) return;
    for (uint32_t e = it->second; e != UINT32_MAX; e = set->next_of_source[e]) {
      if (candidate_of[e] != UINT32_MAX) f(candidates[candidate_of[e]]);
    }
  };

  PickResult result;
  uint64_t request_key = 0;
  // The request's canonical block hashes, computed once: the index's
  // lookup and predict on route both take them.
  thread_local std::vector<uint64_t> local;
  thread_local std::vector<uint64_t> seq_hashes;
  seq_hashes.clear();
  if (input.tokens != nullptr && !input.tokens->empty()) {
    request_key = XXH3_64bits(input.tokens->data(), input.tokens->size() * sizeof(uint32_t));
    // The one query core: the same lookup as /v1/match, as
    // IndexInterface::MatchTokens makes it (the model's block size, the
    // lora/salt seed, the full blocks chained, MatchSequenceHashes), with
    // the hashes kept for predict on route instead of computed twice.
    if (const std::optional<uint32_t> block_size = index_->BlockSize(model);
        block_size.has_value() && *block_size > 0) {
      const size_t full_blocks = input.tokens->size() / *block_size;
      hashing::ComputeLocalHashes(
          std::span<const uint32_t>(*input.tokens).first(full_blocks * *block_size), *block_size,
          hashing::LocalHashSeed(lora, input.cache_salt), &local);
      hashing::ComputeSequenceHashes(local, std::nullopt, &seq_hashes);
      StatusOr<index::MatchResult> match =
          index_->MatchSequenceHashes(model, std::span<const uint64_t>(seq_hashes));
      if (match.ok()) {
        result.prefix_scored = true;
        result.request_blocks = static_cast<uint32_t>(full_blocks);
        if (full_blocks > 0) {
          for (const index::WorkerMatch& row : match->workers) {
            for_source(row.source, [&](Candidate& c) {
              c.matched = row.longest;
              c.prefix =
                  (config_.tier_weights[0] * row.device + config_.tier_weights[1] * row.host +
                   config_.tier_weights[2] * row.disk + config_.tier_weights[3] * row.external) /
                  static_cast<double>(full_blocks);
            });
          }
        }
      }
    }
  } else {
    request_key = load_only_counter_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  const bool predict = result.prefix_scored && result.request_blocks > 0 &&
                       speculative_ != nullptr && speculative_->enabled();
  if (predict) {
    // Predict on route: blocks recent picks sent to a source count for it
    // as device blocks, only past what the index holds (max, never a sum).
    thread_local std::vector<std::pair<SourceKey, uint32_t>> held;
    speculative_->Prefixes(model, seq_hashes, SpeculativeCache::Clock::now(), &held);
    for (const auto& [source, blocks] : held) {
      for_source(source, [&, blocks = blocks](Candidate& c) {
        if (blocks <= c.matched) return;
        c.speculative = blocks - c.matched;
        c.prefix = std::max(c.prefix, config_.tier_weights[0] * blocks / result.request_blocks);
      });
    }
  }

  int64_t most_inflight = 0;
  double most_waiting = -1, least_waiting = -1;
  for (const Candidate& c : candidates) {
    most_inflight = std::max(most_inflight, c.inflight->load(std::memory_order_relaxed));
    if (c.load.waiting < 0) continue;
    most_waiting = std::max(most_waiting, c.load.waiting);
    least_waiting = least_waiting < 0 ? c.load.waiting : std::min(least_waiting, c.load.waiting);
  }
  for (Candidate& c : candidates) {
    const double inflight =
        most_inflight <= 0
            ? 1.0
            : 1.0 - static_cast<double>(c.inflight->load(std::memory_order_relaxed)) /
                        static_cast<double>(most_inflight);
    // No fresh sample: 0 on kv and queue.
    const double kv = c.load.kv_use < 0 ? 0.0 : 1.0 - c.load.kv_use;
    const double queue = c.load.waiting < 0 ? 0.0
                         : most_waiting <= least_waiting
                             ? 1.0
                             : (most_waiting - c.load.waiting) / (most_waiting - least_waiting);
    c.score = config_.prefix_weight * c.prefix + config_.inflight_weight * inflight +
              config_.kv_cache_weight * kv + config_.queue_weight * queue;
    c.tie = TieKey(config_.seed, request_key, c.endpoint->address);
  }
  const size_t keep = size_t{config_.fallbacks} + 1;
  const auto better = [](const Candidate& a, const Candidate& b) {
    if (a.score > b.score + 1e-12) return true;
    if (b.score > a.score + 1e-12) return false;
    return a.tie > b.tie;
  };
  // Only the best `keep` in order (a partial sort, not all 64); the rest is
  // sorted only when shared addresses leave fewer than `keep` distinct.
  auto sorted_end = candidates.begin() + static_cast<ptrdiff_t>(std::min(keep, candidates.size()));
  std::partial_sort(candidates.begin(), sorted_end, candidates.end(), better);
  // Ranks of one worker may share an address: each address once, at its best.
  result.endpoints.reserve(std::min(keep, candidates.size()));
  for (auto it = candidates.begin(); it != candidates.end(); ++it) {
    if (result.endpoints.size() == keep) break;
    if (it == sorted_end) {
      std::sort(sorted_end, candidates.end(), better);
      sorted_end = candidates.end();
    }
    if (std::find(result.endpoints.begin(), result.endpoints.end(), it->endpoint->address) !=
        result.endpoints.end()) {
      continue;
    }
    result.endpoints.push_back(it->endpoint->address);
  }
  result.matched_blocks = candidates[0].matched + candidates[0].speculative;
  result.speculative_blocks = candidates[0].speculative;
  if (predict) {
    if (result.speculative_blocks > 0) speculative_->CountPick();
    speculative_->Record(model, candidates[0].endpoint->source, seq_hashes,
                         SpeculativeCache::Clock::now());
  }
  candidates[0].inflight->fetch_add(1, std::memory_order_relaxed);
  return result;
}

}  // namespace kvindex::epp
