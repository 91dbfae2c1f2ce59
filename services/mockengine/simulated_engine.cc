#include "services/mockengine/simulated_engine.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "shared/hashing/canonical_hash.h"

namespace kvindex::mockengine {
namespace {

wire::WireEvent MakeEvent(wire::EventType type, std::string medium) {
  wire::WireEvent event;
  event.type = type;
  if (!medium.empty()) event.medium = std::move(medium);
  return event;
}

}  // namespace

void SimulatedEngine::Lru::Touch(uint64_t hash) {
  auto it = where.find(hash);
  order.splice(order.begin(), order, it->second);
}

void SimulatedEngine::Lru::Insert(uint64_t hash) {
  order.push_front(hash);
  where[hash] = order.begin();
}

uint64_t SimulatedEngine::Lru::PopLeastRecent() {
  const uint64_t hash = order.back();
  order.pop_back();
  where.erase(hash);
  return hash;
}

SimulatedEngine::SimulatedEngine(EngineOptions options) : options_(std::move(options)) {
  if (options_.device_capacity_blocks == 0) options_.device_capacity_blocks = 1;
}

uint64_t SimulatedEngine::EngineHash(uint64_t canonical) const {
  // Private to the engine: the canonical chain re-hashed with the source's seed.
  return XXH3_64bits_withSeed(&canonical, sizeof(canonical), options_.hash_seed);
}

std::optional<uint64_t> SimulatedEngine::CanonicalOf(uint64_t engine_hash) const {
  auto it = meta_.find(engine_hash);
  if (it == meta_.end()) return std::nullopt;
  return it->second.canonical;
}

size_t SimulatedEngine::Capacity(int tier) const {
  switch (tier) {
    case 0:
      return options_.device_capacity_blocks;
    case 1:
      return options_.host_capacity_blocks;
    default:
      return options_.disk_capacity_blocks;
  }
}

int SimulatedEngine::NextTier(int tier) const {
  for (int next = tier + 1; next < kTiers; ++next) {
    if (Capacity(next) > 0) return next;
  }
  return -1;
}

bool SimulatedEngine::HeldAnywhere(uint64_t hash) const {
  return tiers_[0].Contains(hash) || tiers_[1].Contains(hash) || tiers_[2].Contains(hash);
}

void SimulatedEngine::Offload(int tier, uint64_t victim) {
  removed_[tier].push_back(victim);
  --delta_[tier][victim];
  const int next = NextTier(tier);
  if (next < 0) return;
  Lru& lower = tiers_[next];
  if (lower.Contains(victim)) {
    lower.Touch(victim);
    return;
  }
  while (lower.size() >= Capacity(next)) Offload(next, lower.PopLeastRecent());
  lower.Insert(victim);
  stored_[next].push_back(victim);
  ++delta_[next][victim];
}

void SimulatedEngine::EmitTierEvents(std::vector<wire::WireEvent>* out) {
  // Only the net change per tier is announced (a block evicted and offloaded
  // back within one batch says nothing), stores first: every offloaded block
  // was held before this batch, so the agent resolves the placeholders
  // before the removals below can drop its engine hash.
  for (int tier = 1; tier < kTiers; ++tier) {
    const std::string& medium = tier == 1 ? options_.host_medium : options_.disk_medium;
    wire::WireEvent placeholders = MakeEvent(wire::EventType::kBlockStored, medium);
    for (uint64_t hash : stored_[tier]) {
      auto d = delta_[tier].find(hash);
      if (d->second <= 0) continue;
      d->second = 0;  // emitted once
      const BlockMeta& meta = meta_.at(hash);
      // Known to the agent: held before this batch (now, or changed by it).
      const bool parent_known =
          !meta.parent || HeldAnywhere(*meta.parent) || delta_[0].contains(*meta.parent) ||
          delta_[1].contains(*meta.parent) || delta_[2].contains(*meta.parent);
      if (options_.self_describing_offload && parent_known && !meta.tokens.empty()) {
        wire::WireEvent stored = MakeEvent(wire::EventType::kBlockStored, medium);
        stored.block_hashes.push_back(hash);
        stored.parent_block_hash = meta.parent;
        stored.token_ids = meta.tokens;
        stored.block_size = options_.block_size;
        out->push_back(std::move(stored));
      } else {
        placeholders.block_hashes.push_back(hash);
      }
    }
    if (!placeholders.block_hashes.empty()) out->push_back(std::move(placeholders));
  }
  for (int tier = kTiers - 1; tier >= 0; --tier) {
    const std::string medium =
        tier == 0 ? "GPU" : (tier == 1 ? options_.host_medium : options_.disk_medium);
    wire::WireEvent removed = MakeEvent(wire::EventType::kBlockRemoved, medium);
    for (uint64_t hash : removed_[tier]) {
      auto d = delta_[tier].find(hash);
      if (d->second >= 0) continue;
      d->second = 0;
      removed.block_hashes.push_back(hash);
    }
    if (!removed.block_hashes.empty()) out->push_back(std::move(removed));
  }
  for (int tier = 0; tier < kTiers; ++tier) {
    for (uint64_t hash : removed_[tier]) {
      if (!HeldAnywhere(hash)) meta_.erase(hash);
    }
    stored_[tier].clear();
    removed_[tier].clear();
    delta_[tier].clear();
  }
}

PrefixHit SimulatedEngine::ServePrompt(std::span<const uint32_t> tokens,
                                       std::vector<wire::WireEvent>* out) {
  const uint32_t bs = options_.block_size;
  hashing::ComputeLocalHashes(tokens, bs, hashing::LocalHashSeed("", ""), &local_);
  hashing::ComputeSequenceHashes(local_, std::nullopt, &canonical_);
  const size_t blocks = canonical_.size();
  engine_.resize(blocks);
  for (size_t i = 0; i < blocks; ++i) engine_[i] = EngineHash(canonical_[i]);

  PrefixHit hit;
  hit.prompt_blocks = static_cast<uint32_t>(blocks);
  for (size_t i = 0; i < blocks; ++i) {
    if (tiers_[0].Contains(engine_[i])) {
      ++hit.device;
    } else if (tiers_[1].Contains(engine_[i])) {
      ++hit.host;
    } else if (tiers_[2].Contains(engine_[i])) {
      ++hit.disk;
    } else {
      break;
    }
  }

  // A prompt longer than the device keeps only what fits (its head).
  const size_t wanted = std::min(blocks, options_.device_capacity_blocks);
  on_device_.assign(wanted, 0);
  size_t to_insert = 0;
  // Touch tail first, so the head ends most recent: like vLLM, which frees a
  // request's blocks tail first, a chain is evicted from its end.
  for (size_t i = wanted; i-- > 0;) {
    if (tiers_[0].Contains(engine_[i])) {
      tiers_[0].Touch(engine_[i]);
      on_device_[i] = 1;
    } else {
      ++to_insert;
      if (tiers_[1].Contains(engine_[i])) tiers_[1].Touch(engine_[i]);
      if (tiers_[2].Contains(engine_[i])) tiers_[2].Touch(engine_[i]);
    }
  }
  if (to_insert == 0) return hit;

  // The touched prefix is most recent, so eviction takes other blocks first.
  while (tiers_[0].size() + to_insert > options_.device_capacity_blocks) {
    Offload(0, tiers_[0].PopLeastRecent());
  }
  EmitTierEvents(out);

  // Device stores, one event per run of blocks not on the device (a run
  // loaded back from host/disk, then the new tail), chained to the block
  // before it, which is on the device or was stored by the previous run.
  for (size_t i = 0; i < wanted;) {
    if (on_device_[i]) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < wanted && !on_device_[end]) ++end;
    wire::WireEvent stored = MakeEvent(wire::EventType::kBlockStored, "GPU");
    stored.block_size = bs;
    if (i > 0) stored.parent_block_hash = engine_[i - 1];
    stored.block_hashes.assign(engine_.begin() + static_cast<std::ptrdiff_t>(i),
                               engine_.begin() + static_cast<std::ptrdiff_t>(end));
    stored.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i * bs),
                            tokens.begin() + static_cast<std::ptrdiff_t>(end * bs));
    for (size_t j = i; j < end; ++j) {
      BlockMeta& meta = meta_[engine_[j]];
      meta.canonical = canonical_[j];
      if (j > 0) meta.parent = engine_[j - 1];
      if (options_.self_describing_offload && meta.tokens.empty()) {
        meta.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(j * bs),
                           tokens.begin() + static_cast<std::ptrdiff_t>((j + 1) * bs));
      }
    }
    out->push_back(std::move(stored));
    i = end;
  }
  for (size_t i = wanted; i-- > 0;) {
    if (on_device_[i]) {
      tiers_[0].Touch(engine_[i]);
    } else {
      tiers_[0].Insert(engine_[i]);
    }
  }
  return hit;
}

void SimulatedEngine::Reset() {
  for (Lru& tier : tiers_) tier = Lru();
  meta_.clear();
}

void SimulatedEngine::Clear(std::vector<wire::WireEvent>* out) {
  Reset();
  out->push_back(MakeEvent(wire::EventType::kAllBlocksCleared, ""));
}

}  // namespace kvindex::mockengine
