// SourceProcessor: one engine publisher's msgpack batches -> placement events.
//
// Implements semantics.md section 3 for one source (one --source endpoint):
// decode a KVEventBatch (shared/wire), then per engine event apply, in the
// stated order, the group filter, medium -> tier, locality, placeholder
// resolution, block-size, token-count and parent checks; compute canonical
// hashes from tokens (shared/hashing) chained through the per-rank
// engine-hash -> canonical-hash map; reference-count per (dp_rank, tier,
// canonical hash) and emit "stored" only on 0 -> 1 and "removed" only on
// 1 -> 0. Every drop is counted in SourceStats by DropReason.
//
// Use one per engine socket; the ZMQ side (sequence, gaps, replay, restarts)
// decides when to call ClearAll. For a one-shot decode of files use
// `kvindex-ctl decode`, which drives this class with an EventObserver.
//
//   SourceStats stats;
//   SourceProcessor processor({.worker = "w0", .model = "m", .block_size = 16}, &stats);
//   std::vector<PlacementEvent> out;
//   processor.ClearAll(&out);                        // start-up: publish "cleared"
//   Status s = processor.ProcessPayload(payload, &out);  // appends to out
//
// Stored-event emission: one "stored" placement per run of consecutive 0 -> 1
// blocks whose parent chain is intact; when re-announced blocks (count
// already > 0) sit between new ones, the event is split so that every
// emitted placement has a correct parent_hash (the canonical hash of the
// block before its first block, nullopt = root). Removals emit one "removed"
// placement with every 1 -> 0 block, in event order.
//
// Cost: per block one XXH3 over 4*block_size bytes, one chain XXH3, two
// flat_hash_map operations; no allocation per block in steady state (scratch
// vectors are reused; the output vector grows per placement event).
// Memory: ~80 bytes per tracked engine block (two hash-map slots).
//
// Thread safety: not thread safe; one thread drives it. SourceStats may be
// read concurrently (relaxed atomics).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/base/status.h"
#include "shared/model/placement_event.h"
#include "shared/model/tier.h"
#include "shared/normalize/event_observer.h"
#include "shared/normalize/source_stats.h"
#include "shared/wire/batch_decoder.h"
#include "shared/wire/engine_kind.h"

namespace kvindex::normalize {

namespace internal {
struct EngineEntry;
struct RankState;
}  // namespace internal

struct SourceOptions {
  // Worker id from configuration (pod / endpoint name). Default: "".
  std::string worker;
  // Model name stamped on every placement event. Default: "".
  std::string model;
  // The model's tokens per block; BlockStored events with another block_size
  // are dropped (block_size_mismatch). Must be > 0. Default: 16.
  uint32_t block_size = 16;
  // Engine publishing on this socket (metric label). Default: vLLM.
  wire::EngineKind engine = wire::EngineKind::kVllm;
  // Configured rank of this socket; the batch envelope's rank wins when it
  // is present (not nil). Default: 0.
  uint32_t dp_rank = 0;
  // Envelope ranks accepted: [0, dp_rank_limit); a batch naming another is
  // dropped whole (rank_out_of_range). 0 = any. Default: 0.
  uint32_t dp_rank_limit = 0;
  // One publisher, one rank: the first accepted batch fixes the rank this
  // processor serves (its envelope's, else dp_rank); a later batch naming
  // another is dropped whole (rank_out_of_range). Clears then name that
  // rank only, never the default dp_rank another socket of the worker
  // serves. Default: false (any rank in range).
  bool pin_first_rank = false;
  // Blocks a rank may hold per tier; a stored event on a tier already at it
  // is dropped whole (block_cap), so memory stays bounded and the index
  // undercounts, never overcounts. Checked per event: one event may take a
  // tier past it by its own blocks. 0 = no cap. Default: 0.
  uint64_t max_blocks_per_tier = 0;
  // Which KV-cache groups are indexed. `group.spec_kind` is a view: the
  // string it points to must outlive the processor. Default: group 0,
  // "full_attention".
  GroupFilter group;
  // The engine re-announces blocks it reuses from its prefix cache (vLLM
  // kv_cache_report_mode="full"): on the device tier a store of a block the
  // rank already holds there is a refresh, so the count saturates at 1 and
  // the first removal removes it (semantics.md section 3, "Re-announcing
  // sources"). Exact counting would keep reused blocks forever. Default: false.
  bool report_full = false;
  // Capacity hint: engine blocks a rank is expected to hold across its
  // tiers (e.g. the engine's GPU block count). The per-rank maps are sized
  // for it up front, so steady state never rehashes. 0 = grow on demand.
  // Default: 0.
  uint32_t expected_blocks = 0;

  Status Validate() const;
};

class SourceProcessor {
 public:
  // `stats` is not owned and must outlive the processor (nullptr: private counters).
  SourceProcessor(SourceOptions options, SourceStats* stats);
  ~SourceProcessor();
  SourceProcessor(const SourceProcessor&) = delete;
  SourceProcessor& operator=(const SourceProcessor&) = delete;

  // Decodes one msgpack KVEventBatch and normalizes it, appending placement
  // events (kind, model, source, tier, block_size, parent_hash, block_hashes
  // filled, and sglang_hashes for an SGLang engine; agent/event_id/timestamp
  // left for the caller) to *out.
  // A payload that does not decode: nothing of it is applied, the source is
  // cleared (ClearAll: one kCleared per rank), decode_error is counted, and
  // InvalidArgument is returned with the byte offset ("byte N: ...").
  Status ProcessPayload(std::span<const uint8_t> payload, std::vector<PlacementEvent>* out);

  // Normalizes an already decoded batch (the views of ProcessPayload's
  // decode step). For callers with their own decoder (benchmark baselines,
  // fuzzers, other transports). Never fails.
  void ProcessDecoded(const wire::EngineBatch& batch, std::vector<PlacementEvent>* out);

  // Engine restart / unrecoverable gap / start-up: resets the state of every
  // rank this processor has seen plus the configured rank, appending one
  // kCleared event per rank (ascending dp_rank).
  void ClearAll(std::vector<PlacementEvent>* out);

  // Source snapshot (docs/events.md, "Source snapshots"): appends, per rank,
  // one kCleared and then kStored events holding exactly the blocks the rank
  // holds now in each tier, chained parent first where parents are known, at
  // most `max_hashes` hashes per event. Applied in order after the clear,
  // they replace the source's state in a router. State is unchanged.
  void Snapshot(std::vector<PlacementEvent>* out, size_t max_hashes = 65536) const;

  // The normalization state (every rank's engine-hash map with its counts),
  // appended to *out, so a restarted process continues from it instead of
  // clearing the source (SaveState / RestoreState; source_processor_state.cc).
  void SaveState(std::string* out) const;
  // Replaces the state with a saved one (from a processor with the same
  // worker, model and block size). DataLoss when `state` does not decode or
  // breaks an invariant (rank_state.h); the state is then empty.
  Status RestoreState(std::string_view state);
  // Blocks the state says each (rank, tier) holds, for a consistency check
  // against an index: ((dp_rank << 2) | tier) -> count, ascending.
  std::vector<std::pair<uint64_t, uint64_t>> HeldCounts() const;

  // Per-engine-event hook (nullptr = off; no cost when off). Not owned.
  void SetObserver(EventObserver* observer) { observer_ = observer; }

  // Engine hashes currently in the per-rank maps (all ranks).
  size_t tracked_blocks() const;

  // Byte offset inside the payload of the last ProcessPayload failure.
  size_t last_error_offset() const { return decoder_.error_offset(); }

  const SourceOptions& options() const { return options_; }

 private:
  internal::RankState& Rank(uint32_t dp_rank);
  // The rank ClearAll always names: the pinned rank, else options_.dp_rank.
  uint32_t HomeRank() const { return pinned_rank_.value_or(options_.dp_rank); }
  // pin_first_rank: the first batch fixes the rank. False: drop the batch.
  bool PinRank(uint32_t dp_rank, std::vector<PlacementEvent>* out);
  void Stored(internal::RankState& rank, const wire::EngineEvent& event,
              std::vector<PlacementEvent>* out);
  void Removed(internal::RankState& rank, const wire::EngineEvent& event,
               std::vector<PlacementEvent>* out);
  void Cleared(internal::RankState& rank, std::vector<PlacementEvent>* out);
  void Drop(DropReason reason, uint64_t count);
  // Increments (rank, tier, canonical) for block `index` of the event and
  // records it for emission when it went 0 -> 1.
  void Increment(internal::RankState& rank, internal::EngineEntry& entry, Tier tier,
                 uint32_t index);
  // `engine_hashes`: the event's engine hashes, published beside the
  // canonical ones as sglang_hashes; empty = not published.
  void EmitStoredRuns(const internal::RankState& rank, Tier tier,
                      std::span<const uint64_t> engine_hashes, std::vector<PlacementEvent>* out);
  // An SGLang source publishes its engine hashes (sgl-router's hashes,
  // docs/compat.md "SGLang"): `hashes` for it, empty for the others.
  std::span<const uint64_t> SglangHashes(std::span<const uint64_t> hashes) const;
  PlacementEvent& NewPlacement(PlacementKind kind, uint32_t dp_rank,
                               std::vector<PlacementEvent>* out);
  // Local hashes of a stored event's tokens (lora/salt seed, EAGLE windows) into local_.
  void ComputeLocalHashes(const wire::EngineEvent& event);
  void InformationalHashes(const internal::RankState& rank, const wire::EngineEvent& event);

  SourceOptions options_;
  SourceStats* stats_;
  std::unique_ptr<SourceStats> owned_stats_;  // when constructed with stats == nullptr
  EventObserver* observer_ = nullptr;
  wire::BatchDecoder decoder_;
  wire::EngineBatch batch_;
  // Ranks seen, ascending by dp_rank (usually one).
  std::vector<std::unique_ptr<internal::RankState>> ranks_;
  // pin_first_rank: the rank served, once the first batch named it.
  std::optional<uint32_t> pinned_rank_;

  // Scratch, reused across events.
  std::vector<uint64_t> local_;
  // Blocks that went 0 -> 1 in the current stored event: index in the event,
  // canonical hash and its parent's canonical hash (when known).
  struct NewBlock {
    uint32_t index;
    uint64_t canonical;
    uint64_t parent;
    bool has_parent;
  };
  std::vector<NewBlock> new_blocks_;
  std::vector<uint64_t> sequence_;  // canonical hashes of the current stored event
  struct Removal {
    uint32_t index;  // in the event
    uint64_t canonical;
  };
  std::vector<Removal> removals_;
  std::vector<BlockOutcome> block_outcomes_;
  EventOutcome outcome_;
};

}  // namespace kvindex::normalize
