#include "services/mockengine/simulated_engine.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

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

uint64_t SimulatedEngine::EngineHash(std::optional<uint64_t> parent,
                                     std::span<const uint32_t> block) const {
  // Chained through the seed, like vLLM's hash of (parent, tokens).
  const uint64_t parent_value = parent.value_or(0x9E3779B97F4A7C15ull);
  return XXH3_64bits_withSeed(block.data(), block.size_bytes(),
                              options_.hash_seed ^ (parent_value * 0xD1B54A32D192ED03ull));
}

void SimulatedEngine::ServePrompt(std::span<const uint32_t> tokens,
                                  std::vector<wire::WireEvent>* out) {
  const uint32_t bs = options_.block_size;
  const size_t blocks = tokens.size() / bs;
  std::vector<uint64_t> hashes(blocks);
  std::optional<uint64_t> parent;
  for (size_t i = 0; i < blocks; ++i) {
    hashes[i] = EngineHash(parent, tokens.subspan(i * bs, bs));
    parent = hashes[i];
  }
  size_t cached = 0;
  while (cached < blocks && device_.Contains(hashes[cached])) device_.Touch(hashes[cached++]);
  if (cached == blocks) return;
  // A prompt longer than the cache keeps only what fits (its head).
  const size_t wanted = std::min(blocks, cached + options_.device_capacity_blocks);
  const size_t to_store = wanted - cached;
  if (to_store == 0) return;

  wire::WireEvent offloaded = MakeEvent(wire::EventType::kBlockStored, options_.host_medium);
  wire::WireEvent host_removed = MakeEvent(wire::EventType::kBlockRemoved, options_.host_medium);
  wire::WireEvent device_removed = MakeEvent(wire::EventType::kBlockRemoved, "GPU");
  // Protect the reused prefix: it was just touched, so LRU order evicts other
  // blocks first unless the prefix alone fills the cache.
  while (device_.size() + to_store > options_.device_capacity_blocks) {
    const uint64_t victim = device_.PopLeastRecent();
    device_removed.block_hashes.push_back(victim);
    if (options_.host_capacity_blocks == 0) continue;
    if (host_.Contains(victim)) {
      host_.Touch(victim);
      continue;
    }
    while (host_.size() >= options_.host_capacity_blocks) {
      host_removed.block_hashes.push_back(host_.PopLeastRecent());
    }
    host_.Insert(victim);
    offloaded.block_hashes.push_back(victim);
  }
  // Offload copies land before the device frees its copy, as real
  // offloading connectors do; the agent resolves placeholders through it.
  // A block offloaded and evicted again within this batch must be stored on
  // the host tier before it is removed from it.
  if (!offloaded.block_hashes.empty()) out->push_back(std::move(offloaded));
  if (!host_removed.block_hashes.empty()) out->push_back(std::move(host_removed));
  if (!device_removed.block_hashes.empty()) out->push_back(std::move(device_removed));

  wire::WireEvent stored = MakeEvent(wire::EventType::kBlockStored, "GPU");
  stored.block_size = bs;
  if (cached > 0) stored.parent_block_hash = hashes[cached - 1];
  for (size_t i = cached; i < wanted; ++i) {
    device_.Insert(hashes[i]);
    stored.block_hashes.push_back(hashes[i]);
  }
  stored.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(cached * bs),
                          tokens.begin() + static_cast<std::ptrdiff_t>(wanted * bs));
  out->push_back(std::move(stored));
}

void SimulatedEngine::Clear(std::vector<wire::WireEvent>* out) {
  device_ = Lru();
  host_ = Lru();
  out->push_back(MakeEvent(wire::EventType::kAllBlocksCleared, ""));
}

}  // namespace kvindex::mockengine
