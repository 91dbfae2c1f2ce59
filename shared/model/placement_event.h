// Placement events: the normalized, engine-independent facts that agents
// publish and routers apply (semantics.md sections 3-4, docs/events.md).
//
// Block hashes are canonical sequence hashes (shared/hashing), never engine
// hashes. An agent publishes "stored" only when a (source, tier, block)
// reference count goes 0 -> 1 and "removed" only on 1 -> 0, so applying the
// events in log order is plain set arithmetic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/model/source_key.h"
#include "shared/model/tier.h"

namespace kvindex {

enum class PlacementKind : uint8_t {
  kStored = 0,         // blocks now held by source in tier
  kRemoved = 1,        // blocks no longer held by source in tier
  kCleared = 2,        // source holds nothing in any tier
  kHeartbeat = 3,      // agent is alive; lists its sources and lease
  kWorkerExpired = 4,  // every rank of `source.worker` is gone (liveness expiry)
  // A router found `agent` silent past its lease after applying its heartbeat
  // at log position `heartbeat_seq`. Every replica decides at this event's log
  // position (consume::AgentTable): it clears the agent's sources unless a
  // newer heartbeat of the agent precedes it in the log.
  kAgentExpired = 5,
};
inline constexpr int kNumPlacementKinds = 6;

// "stored", "removed", "cleared", "heartbeat", "worker_expired", "agent_expired".
std::string_view PlacementKindName(PlacementKind kind);

// A heartbeat's announcement of where a source's engine serves requests
// (the OpenAI server a gateway routes to; docs/epp.md, "Endpoints").
struct SourceEndpoint {
  SourceKey source;
  std::string model;    // the source's model ("" = not said)
  std::string address;  // "host:port"

  friend bool operator==(const SourceEndpoint&, const SourceEndpoint&) = default;
};

struct PlacementEvent {
  PlacementKind kind = PlacementKind::kStored;
  std::string model;
  SourceKey source;
  // Node id of the agent that produced the event (liveness, dedup).
  std::string agent;
  // Per-agent counter, strictly increasing; (agent, event_id) de-duplicates
  // re-publishes after an agent reconnect.
  uint64_t event_id = 0;
  // Agent wall clock when the event was produced, in ns since the epoch.
  // Informational (lag metrics); replicas never decide on it.
  uint64_t timestamp_ns = 0;

  // kStored / kRemoved:
  Tier tier = Tier::kDevice;
  // kStored: tokens per block of `model`, so routers hash queries without
  // extra configuration.
  uint32_t block_size = 0;
  // kStored: canonical hash of the block before block_hashes[0]; nullopt = root.
  std::optional<uint64_t> parent_hash;
  // Canonical sequence hashes, in chain order for kStored.
  std::vector<uint64_t> block_hashes;
  // kStored from an SGLang source, optional: the engine's own block hashes
  // (SGLang's SHA-256 page chain as i64 bits, what sgl-router sends),
  // parallel to block_hashes (same count, same order). Routers keep them as
  // aliases of the canonical hashes for SGLang's indexer API
  // (compat::SglangAliasMap); the index itself never sees them. Empty = none.
  std::vector<uint64_t> sglang_hashes;

  // kHeartbeat: lease in milliseconds and the sources the agent serves.
  uint32_t lease_ms = 0;
  std::vector<SourceKey> sources;
  // kHeartbeat: endpoints of some of `sources` (those configured with one).
  std::vector<SourceEndpoint> endpoints;

  // kAgentExpired: log position of the last heartbeat of `agent` that the
  // deciding router had applied (0: none).
  uint64_t heartbeat_seq = 0;

  friend bool operator==(const PlacementEvent&, const PlacementEvent&) = default;
};

}  // namespace kvindex
