// LoadTable: the latest engine load per source, as agents publish it on core
// NATS or the embedded router scrapes it (docs/epp.md, "Load signals"). A
// sample older than max_age is not used (counted as stale). Router-local,
// never in the log, a checkpoint or /v1/state.
//
// Thread safety: every method from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/codec/load_codec.h"
#include "shared/model/source_key.h"

namespace kvindex::epp {

class LoadTable {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LoadTable(std::chrono::milliseconds max_age) : max_age_(max_age) {}

  void Update(const SourceKey& source, const codec::EngineLoad& load, Clock::time_point now);
  // The source's sample when it is at most max_age old; nullopt when there
  // is none or it is stale (then counted in stale()).
  std::optional<codec::EngineLoad> Fresh(const SourceKey& source, Clock::time_point now) const;
  // Fresh for many sources under one lock (the picker's candidates): for
  // each i < n, on_fresh(i, sample) when source_of(i) has a fresh sample;
  // stale ones are counted as by Fresh.
  template <typename SourceOf, typename OnFresh>
  void FreshEach(size_t n, SourceOf source_of, Clock::time_point now, OnFresh on_fresh) const {
    ReaderLock lock(&mu_);
    if (entries_.empty()) return;
    uint64_t stale = 0;
    for (size_t i = 0; i < n; ++i) {
      auto it = entries_.find(source_of(i));
      if (it == entries_.end()) continue;
      if (now - it->second.received > max_age_) {
        ++stale;
      } else {
        on_fresh(i, it->second.load);
      }
    }
    if (stale > 0) stale_.fetch_add(stale, std::memory_order_relaxed);
  }

  uint64_t updates() const { return updates_.load(std::memory_order_relaxed); }
  uint64_t stale() const { return stale_.load(std::memory_order_relaxed); }
  size_t size() const;
  std::chrono::milliseconds max_age() const { return max_age_; }

 private:
  struct Entry {
    codec::EngineLoad load;
    Clock::time_point received;
  };
  const std::chrono::milliseconds max_age_;
  mutable SharedMutex mu_;
  absl::flat_hash_map<SourceKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> updates_{0};
  mutable std::atomic<uint64_t> stale_{0};
};

}  // namespace kvindex::epp
