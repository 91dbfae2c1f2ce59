// Value types of the tiered index API: match results, statistics, options.
//
// Shared by KvIndex (the optimized index) and ReferenceIndex (the test
// oracle) so both answer in exactly the same shape (semantics.md section 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/model/source_key.h"
#include "shared/model/tier.h"

namespace kvindex::index {

// What one source holds of a query's prefix (semantics.md section 5).
struct WorkerMatch {
  SourceKey source;
  // longest = device + host + disk + external; each matched block counts once,
  // in the fastest tier that holds it. device_prefix <= longest.
  uint32_t longest = 0, device = 0, host = 0, disk = 0, external = 0, device_prefix = 0;

  friend bool operator==(const WorkerMatch&, const WorkerMatch&) = default;
};

struct MatchResult {
  uint32_t blocks = 0;               // number of full blocks in the query
  uint64_t applied_seq = 0;          // log position applied when the match ran
  std::vector<WorkerMatch> workers;  // longest desc, then worker, then dp_rank; longest==0 omitted

  friend bool operator==(const MatchResult&, const MatchResult&) = default;
};

struct SourceInfo {
  std::string model;
  SourceKey source;
  uint64_t entries[kNumTiers] = {};
};

struct IndexStats {
  uint64_t applied_seq = 0;
  uint64_t digest = 0;  // semantics.md section 6
  uint64_t entries[kNumTiers] = {};
  uint64_t sources = 0;  // sources holding at least one entry
  // Stored events of sources beyond a model's source capacity (4096): not
  // indexed (fail closed), counted so an operator sees it.
  uint64_t events_over_source_limit = 0;
  // Index memory exhausted (KvIndexOptions::max_model_bytes, or the arena's
  // hard limit): blocks of stored events not indexed, and sources cleared
  // because a removal could not split a node (fail closed, both counted).
  uint64_t blocks_not_indexed = 0;
  uint64_t sources_cleared_on_exhaustion = 0;
  // Stored events of models beyond KvIndexOptions::max_models: not indexed
  // (fail closed), counted.
  uint64_t events_over_model_limit = 0;
  uint64_t bytes_allocated = 0;  // real bytes held by the index's structures
};

// KvIndex::ProfileLocator: the shape of one model's block locator, for the
// benchmark's --profile and for tests (not part of IndexInterface).
struct LocatorProfile {
  uint64_t capacity = 0;  // slots
  uint64_t used = 0;      // live blocks (one slot each)
  uint64_t mapped_bytes = 0;
  // Rebuilds so far: all of them, and those forced by a probe that found no
  // free slot within its bound (the rest crossed the load limit).
  uint64_t growths = 0;
  uint64_t overflow_growths = 0;
  // Only when asked for (a scan of every slot): displacement[d] = blocks d
  // buckets (cache lines) past their home bucket; clusters[l] = home buckets
  // from which a lookup of an absent block reads l lines (last entry:
  // longer); tag_false_matches = tag matches on other blocks along every
  // block's lookup (node reads a probe spends in vain).
  std::vector<uint64_t> displacement;
  std::vector<uint64_t> clusters;
  uint64_t tag_false_matches = 0;
};

// KvIndex::SetClearObserverForTesting: told, on the writer thread, of every
// pass a clear makes over a model's nodes and of every hold of the removal
// lock (the one fallback readers wait for) inside it. Tests count passes and
// holds; kvindex-bench index --workload clear times the holds. Not part of
// IndexInterface; the index itself reads no clock.
// A clear changes at most this many nodes per hold of the removal lock, so a
// fallback reader waits for a bounded run, not for a scan of the model.
inline constexpr size_t kClearNodesPerLockHold = 256;

class ClearObserver {
 public:
  virtual ~ClearObserver() = default;
  // One pass over `model`'s nodes clearing `sources` source ids.
  virtual void OnClearPass(const std::string& model, size_t sources) = 0;
  virtual void OnLockAcquired() = 0;
  // `nodes`: nodes changed during the hold that just ended.
  virtual void OnLockReleased(size_t nodes) = 0;
};

// IndexInterface::set_departure_observer: told, on the writer thread while
// ApplyMessage runs, of blocks that left the index (OnDeparted: no source
// holds them in any tier any more: their last holder removed them, was
// cleared, had its worker expire, or was cleared because a removal could
// not split a node) and of stored blocks the index did not take
// (OnNotIndexed: memory, source or model limits; another source may hold
// them). KvIndex calls once per range of a node or per event, never per
// block (the naive ReferenceIndex per hash). `model` and `seq_hashes` are
// valid only during the call. A block may leave and come back within one
// message: who needs the state after the message looks then. The calls may
// come while readers wait for a removal lock: record, do not compute, and
// never query the index from them. Keeps the consumers of "nobody holds it"
// (the SGLang alias map) at O(blocks that left) per message, not
// O(everything they track) per clear.
class DepartureObserver {
 public:
  virtual ~DepartureObserver() = default;
  virtual void OnDeparted(std::string_view model, std::span<const uint64_t> seq_hashes) = 0;
  virtual void OnNotIndexed(std::string_view model, std::span<const uint64_t> seq_hashes) = 0;
};

struct MatchOptions {
  // Only the first max_blocks blocks of the query are matched. Default: 0 = all.
  uint32_t max_blocks = 0;
};

}  // namespace kvindex::index
