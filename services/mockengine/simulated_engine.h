// SimulatedEngine: the KV-cache bookkeeping of one inference engine (one
// worker's dp rank), enough to emit the same KV events a real vLLM / SGLang /
// TensorRT-LLM worker would, and to say what it holds (the ground truth).
//
// Tiers: device (GPU) with LRU eviction; evicted device blocks offload to the
// host tier (if configured), host-evicted blocks to the disk tier (if
// configured): GPU -> CPU -> disk. A prompt's prefix found on host/disk is
// loaded back to the device (stored on GPU again; the lower copy stays).
// Offload stores are placeholders (engine hash only) or self-describing
// (tokens + parent), as vLLM's OffloadingConnector does.
//
// Engine hashes are private to the engine (seeded per source, as real
// engines' are); each block also keeps its canonical hash (semantics.md
// section 2) so the truth can be reported in the index's terms.
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
#include "shared/model/tier.h"
#include "shared/wire/event_encoder.h"

namespace kvindex::mockengine {

struct EngineOptions {
  uint32_t block_size = 16;
  size_t device_capacity_blocks = 4096;
  size_t host_capacity_blocks = 0;       // 0 = no host tier
  size_t disk_capacity_blocks = 0;       // 0 = no disk tier
  std::string host_medium = "CPU";       // "CPU_PINNED" for SGLang
  std::string disk_medium = "STORAGE";   // "DISK" for SGLang
  bool self_describing_offload = false;  // offload stores carry tokens + parent
  uint64_t hash_seed = 0;                // per source: engine hashes differ across sources
};

// A prompt's prefix found in the engine, each block in the fastest tier
// holding it (semantics.md section 5).
struct PrefixHit {
  uint32_t prompt_blocks = 0;
  uint32_t device = 0, host = 0, disk = 0;
  uint32_t total() const { return device + host + disk; }
};

class SimulatedEngine {
 public:
  explicit SimulatedEngine(EngineOptions options);

  // Serves one prompt: reports its prefix hit, loads host/disk hits back to
  // the device, offloads/evicts to make room and stores the new full blocks.
  // Appends the resulting events to *out (none when all was on the device).
  PrefixHit ServePrompt(std::span<const uint32_t> tokens, std::vector<wire::WireEvent>* out);

  // Engine restart: every tier emptied, no event (a restarted engine says nothing).
  void Reset();
  // Drops everything and appends an AllBlocksCleared.
  void Clear(std::vector<wire::WireEvent>* out);

  const EngineOptions& options() const { return options_; }
  size_t device_blocks() const { return tiers_[0].size(); }
  size_t host_blocks() const { return tiers_[1].size(); }
  size_t disk_blocks() const { return tiers_[2].size(); }
  size_t blocks(Tier tier) const { return tiers_[static_cast<int>(tier)].size(); }
  // The engine hashes a tier holds now (any order): the engine's truth.
  std::vector<uint64_t> device_hashes() const { return tiers_[0].Hashes(); }
  std::vector<uint64_t> host_hashes() const { return tiers_[1].Hashes(); }
  std::vector<uint64_t> disk_hashes() const { return tiers_[2].Hashes(); }
  std::vector<uint64_t> EngineHashes(Tier tier) const {
    return tiers_[static_cast<int>(tier)].Hashes();
  }
  bool Holds(Tier tier, uint64_t engine_hash) const {
    return tiers_[static_cast<int>(tier)].Contains(engine_hash);
  }
  // Canonical hash of a block the engine holds (in any tier).
  std::optional<uint64_t> CanonicalOf(uint64_t engine_hash) const;
  // The engine hash this engine gives the block with canonical hash `canonical`.
  uint64_t EngineHash(uint64_t canonical) const;

 private:
  static constexpr int kTiers = 3;  // device, host, disk
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
  struct BlockMeta {
    uint64_t canonical = 0;
    std::optional<uint64_t> parent;  // engine hash of the previous block
    std::vector<uint32_t> tokens;    // kept only for self-describing offload
  };

  size_t Capacity(int tier) const;
  int NextTier(int tier) const;
  bool HeldAnywhere(uint64_t hash) const;
  // Moves `victim` (just popped from `tier`) down the chain, recording ops.
  void Offload(int tier, uint64_t victim);
  void EmitTierEvents(std::vector<wire::WireEvent>* out);

  EngineOptions options_;
  Lru tiers_[kTiers];
  absl::flat_hash_map<uint64_t, BlockMeta> meta_;
  // Per-batch scratch, reused: per tier, hashes stored/removed in order and
  // their net change (+1 stored, -1 removed, 0 both: no event).
  std::vector<uint64_t> stored_[kTiers], removed_[kTiers];
  absl::flat_hash_map<uint64_t, int> delta_[kTiers];
  std::vector<uint64_t> local_, canonical_, engine_;
  std::vector<uint8_t> on_device_;
};

}  // namespace kvindex::mockengine
