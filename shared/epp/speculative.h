// SpeculativeCache: predict on route (docs/epp.md, "Predict on route").
// After a pick, the replica records the request's blocks as held by the
// picked source for a TTL (default 2 s), so a burst of requests sharing a
// new prefix lands on the same worker before that engine's events arrive.
//
// Fail closed: an entry is never the index's answer, and it stops counting
//   - past its TTL;
//   - once its source reports a removal, a clear, or expires (any such
//     event invalidates every entry of that (model, source): the real
//     index answers from then on);
// and a stored event needs nothing: the real index then holds the block,
// and the picker scores max(real, speculative), never their sum.
// Entries are local to this replica: never in the log, the checkpoint,
// /v1/state or the digest. Bounded: at `max_entries` expired entries are
// purged; if still full, new entries are dropped (counted).
//
//   SpeculativeCache cache({.ttl = std::chrono::seconds(2)});
//   apply_options.on_applied = [&](auto events) { cache.OnApplied(events); };
//   cache.Record("M", source, seq_hashes, now);         // after a pick
//   cache.Prefixes("M", seq_hashes, now, &rows);        // per source: leading blocks
//   cache.OnApplied(events);                            // the apply loop, after the index
//
// Thread safety: every method from any thread (one mutex; a lookup stops
// at the first block nobody holds speculatively).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "shared/base/mutex.h"
#include "shared/model/placement_event.h"
#include "shared/model/source_key.h"

namespace kvindex::epp {

struct SpeculativeOptions {
  // How long a recorded pick counts; 0 = off. Default: 2 s.
  std::chrono::milliseconds ttl{2000};
  // Most (block, source) entries held. Default: 1,000,000.
  size_t max_entries = 1'000'000;
};

struct SpeculativeCounters {
  std::atomic<uint64_t> recorded{0};      // entries written (or refreshed)
  std::atomic<uint64_t> dropped_full{0};  // entries not written: the cache was full
  std::atomic<uint64_t> invalidated{0};   // (model, source) invalidations by a real event
  std::atomic<uint64_t> expired{0};       // entries purged past their TTL
  std::atomic<uint64_t> picks{0};         // picks whose winner only speculation put ahead
};

class SpeculativeCache {
 public:
  using Clock = std::chrono::steady_clock;

  explicit SpeculativeCache(SpeculativeOptions options = {}) { Configure(options); }

  // Sets the TTL and bound (the picker's config, read after the cache was
  // handed to the apply loop). Entries already held keep their expiry.
  void Configure(SpeculativeOptions options);
  bool enabled() const { return ttl_ns_.load(std::memory_order_relaxed) > 0; }

  // The request's canonical sequence hashes now held by `source` until
  // now + ttl.
  void Record(std::string_view model, const SourceKey& source, std::span<const uint64_t> seq_hashes,
              Clock::time_point now);

  // For each source holding seq_hashes[0] speculatively (valid at `now`),
  // the number of leading blocks it holds so: (source, blocks) rows.
  void Prefixes(std::string_view model, std::span<const uint64_t> seq_hashes, Clock::time_point now,
                std::vector<std::pair<SourceKey, uint32_t>>* rows) const;

  // Events the index applied (the apply loop's writer thread): removals,
  // clears and expiries invalidate their sources' entries.
  void OnApplied(std::span<const PlacementEvent> events);

  size_t size() const;
  const SpeculativeCounters& counters() const { return counters_; }
  // A pick the speculative entries decided (the picker counts it here).
  void CountPick() { counters_.picks.fetch_add(1, std::memory_order_relaxed); }

 private:
  struct Holder {
    uint32_t source = 0;      // index into sources_
    uint32_t generation = 0;  // sources_[source].generation when written
    int64_t expires_ns = 0;   // Clock, ns
  };
  struct SourceState {
    std::string model;
    SourceKey source;
    uint32_t generation = 0;
  };
  struct BlockKey {
    uint64_t model_hash = 0, seq_hash = 0;
    friend bool operator==(const BlockKey&, const BlockKey&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const BlockKey& k) {
      return H::combine(std::move(h), k.model_hash, k.seq_hash);
    }
  };

  bool Valid(const Holder& h, int64_t now_ns) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  uint32_t Intern(std::string_view model, const SourceKey& source)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Invalidate(std::string_view model, const PlacementEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PurgeExpired(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable SharedMutex mu_;
  std::atomic<int64_t> ttl_ns_{0};
  size_t max_entries_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<BlockKey, absl::InlinedVector<Holder, 2>> blocks_ ABSL_GUARDED_BY(mu_);
  size_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SourceState> sources_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<std::string, SourceKey>, uint32_t> source_ids_ ABSL_GUARDED_BY(mu_);
  SpeculativeCounters counters_;
};

}  // namespace kvindex::epp
