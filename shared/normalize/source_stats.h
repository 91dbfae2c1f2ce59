// SourceStats: the counters of one engine source (one SourceProcessor).
//
// The agent's metrics probe reads them from another thread and exports
// kvindex_agent_events_dropped_total{source,reason}, ..._events_received_total
// {source,engine,type}, ..._blocks_received_total{...}, and the rest.
//
// Thread safety: every field is a relaxed atomic. Exactly one thread writes
// (the thread that drives the SourceProcessor, which also owns the ingest
// state machine fields at the bottom); any thread may read. Writers use
// Add() (a relaxed load + store, no locked read-modify-write: there is one
// writer). Counters only grow.
#pragma once

#include <atomic>
#include <cstdint>

#include "shared/model/drop_reason.h"

namespace kvindex::normalize {

// Index into SourceStats::events_received (same order as wire::EventType).
inline constexpr int kEventStored = 0;
inline constexpr int kEventRemoved = 1;
inline constexpr int kEventCleared = 2;
inline constexpr int kEventUnknown = 3;
// Index into SourceStats::blocks_received.
inline constexpr int kBlocksStored = 0;
inline constexpr int kBlocksRemoved = 1;

struct SourceStats {
  // Per DropReason; block_not_found and unresolved_placeholder count blocks,
  // every other reason counts events (decode_error counts payloads).
  std::atomic<uint64_t> dropped[kNumDropReasons] = {};
  // Engine events decoded, by type (stored, removed, cleared, unknown).
  std::atomic<uint64_t> events_received[4] = {};
  // Engine blocks (len(block_hashes)) in stored / removed events.
  std::atomic<uint64_t> blocks_received[2] = {};
  std::atomic<uint64_t> batches = 0;                  // payloads handed to ProcessPayload
  std::atomic<uint64_t> empty_batches = 0;            // decoded batches with no events (heartbeats)
  std::atomic<uint64_t> decode_errors = 0;            // payloads that did not decode
  std::atomic<uint64_t> unknown_keys = 0;             // unknown map keys in known events (ignored)
  std::atomic<uint64_t> placements_stored = 0;        // "stored" placement events emitted
  std::atomic<uint64_t> placements_removed = 0;       // "removed" placement events emitted
  std::atomic<uint64_t> blocks_published_stored = 0;  // blocks in them (0 -> 1)
  std::atomic<uint64_t> blocks_published_removed = 0;  // blocks in them (1 -> 0)
  std::atomic<uint64_t> placeholder_blocks_resolved = 0;
  std::atomic<uint64_t> clears = 0;  // "cleared" placement events emitted (any cause)

  // Written by the ingest state machine (ZMQ side), not by SourceProcessor.
  std::atomic<uint64_t> gaps = 0;            // seq gaps detected
  std::atomic<uint64_t> replays_ok = 0;      // gaps recovered by replay
  std::atomic<uint64_t> replays_failed = 0;  // gaps that forced a clear
  std::atomic<uint64_t> restarts = 0;        // engine restarts detected (seq back / new epoch)
};

// Adds n to a counter that only the calling thread writes.
inline void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace kvindex::normalize
