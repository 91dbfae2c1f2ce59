// SimulatedEngine: the KV-cache bookkeeping of one inference engine, enough
// to emit the same KV events a real vLLM/SGLang worker would.
//
// Blocks are identified by engine hashes that are private to the engine
// (seeded per worker, as real engines' are), a device tier with LRU
// eviction, and an optional host tier that evicted device blocks are
// offloaded to (announced as placeholders: engine hash only, no tokens).
//
// Thread safety: none; one thread drives an engine.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/wire/event_encoder.h"

namespace kvindex::mockengine {

struct EngineOptions {
  uint32_t block_size = 16;
  size_t device_capacity_blocks = 4096;
  size_t host_capacity_blocks = 0;  // 0 = no offload tier
  std::string host_medium = "CPU";  // "CPU_PINNED" for SGLang
  uint64_t hash_seed = 0;           // per worker: engine hashes differ across workers
};

class SimulatedEngine {
 public:
  explicit SimulatedEngine(EngineOptions options);

  // Serves one prompt: reuses the cached prefix, offloads/evicts to make room
  // and stores the new full blocks. Appends the resulting events to *out.
  void ServePrompt(std::span<const uint32_t> tokens, std::vector<wire::WireEvent>* out);

  // Drops everything (engine restart) and appends an AllBlocksCleared.
  void Clear(std::vector<wire::WireEvent>* out);

  size_t device_blocks() const { return device_.size(); }
  size_t host_blocks() const { return host_.size(); }
  // The engine hashes each tier holds now (any order): the engine's truth.
  std::vector<uint64_t> device_hashes() const { return device_.Hashes(); }
  std::vector<uint64_t> host_hashes() const { return host_.Hashes(); }

 private:
  struct Lru {
    std::list<uint64_t> order;  // front = most recently used
    absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> where;
    bool Contains(uint64_t hash) const { return where.contains(hash); }
    void Touch(uint64_t hash);
    void Insert(uint64_t hash);
    uint64_t PopLeastRecent();
    size_t size() const { return where.size(); }
    std::vector<uint64_t> Hashes() const { return {order.begin(), order.end()}; }
  };

  uint64_t EngineHash(std::optional<uint64_t> parent, std::span<const uint32_t> block) const;

  EngineOptions options_;
  Lru device_;
  Lru host_;
};

}  // namespace kvindex::mockengine
