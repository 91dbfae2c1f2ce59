// ModelIndex's read path (model_index.h): Match, with its optimistic
// validation and the fallback under the removal mutex, and the statistics
// readers take. Any thread; the writer's side is model_index.cc.
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "shared/index/internal/match_accumulator.h"
#include "shared/index/internal/model_index.h"
#include "shared/index/internal/row_order.h"

namespace kvindex::index::internal {
namespace {

// Validated attempts before a reader falls back to the seqlock's mutex.
constexpr int kReadAttempts = 4;
// Pause iterations (~40-140 cycles each) a reader spins before blocking.
constexpr int kMaxSpins = 4096;

}  // namespace

void ModelIndex::Match(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out) const {
  out->clear();
  if (seq.empty()) return;
  thread_local NodeReadLog log;
  grace_.Enter();
  bool done = false;
  for (int attempt = 0; attempt < kReadAttempts && !done; ++attempt) {
    // An id-free bracket is short: wait it out by spinning rather than
    // spending an attempt or sleeping on the mutex.
    uint64_t begin = seqlock_.ReadBegin();
    for (int spin = 0; (begin & 1) != 0 && spin < kMaxSpins; ++spin) {
      __builtin_ia32_pause();
      begin = seqlock_.ReadBegin();
    }
    if (begin & 1) continue;
    log.Clear();
    MatchOnce(seq, out, &log);
    // ReadValidate's acquire fence orders every node read before the rechecks.
    done = !log.conflict && seqlock_.ReadValidate(begin) && log.Unchanged();
  }
  if (!done) {
    // Bounded wait: the writer holds the mutex for one removal run at most.
    seqlock_.LockFallback(kMaxSpins);
    MatchOnce(seq, out, nullptr);
    seqlock_.UnlockFallback();
  }
  grace_.Exit();
}

void ModelIndex::MatchOnce(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out,
                           NodeReadLog* log) const {
  out->clear();
  const BlockLocator* loc = locator_.load(std::memory_order_acquire);
  MatchAccumulator& acc = MatchAccumulator::ThreadLocal();
  acc.Reset();
  const uint32_t n = static_cast<uint32_t>(seq.size());
  uint32_t k = 0;
  const uint64_t epoch = erase_epoch_.load(std::memory_order_acquire);
  loc->Prefetch(seq[0]);
  while (k < n) {
    const uint64_t hash = seq[k];
    auto is_block = [&](uint32_t id, uint32_t off) { return HashIs(id, off, hash); };
    uint64_t slot = 0;
    if (loc->Find(hash, is_block, &slot) == BlockLocator::kNotFound) {
      // An erase may have moved the block back past the probe: look once more.
      if (erase_epoch_.load(std::memory_order_acquire) == epoch && (epoch & 1) == 0) break;
      if (loc->Find(hash, is_block, &slot) == BlockLocator::kNotFound) break;
    }
    const ChainNode* node = NodeAt(BlockLocator::NodeRef(slot));
    const uint32_t off = BlockLocator::Offset(slot);
    const uint32_t version = node->version.load(std::memory_order_acquire);
    const uint32_t b = node->begin.load(std::memory_order_relaxed);
    // Acquire: pairs with the writer's release of `end` after it wrote the
    // hash of a block appended to this node.
    const uint32_t e = node->end.load(std::memory_order_acquire);
    if (log != nullptr) {
      if ((version & 1) != 0 || off < b || off >= e) {
        // Being modified, or the slot was relabelled under us: retry.
        log->conflict = true;
        return;
      }
      log->versions.emplace_back(&node->version, version);
    } else if (off < b || off >= e) {
      break;  // a stale slot: undercount rather than guess
    }
    const uint32_t limit = std::min(e - off, n - k);
    if (limit < n - k) loc->Prefetch(seq[k + limit]);
    const uint64_t* h = node->hashes() + off;
    // All lines of the run at once: one memory round trip, not a stream.
    for (uint32_t x = 8; x < limit; x += 8) __builtin_prefetch(h + x, 0, 3);
    const uint64_t* q = seq.data() + k;
    uint32_t m = 1;
    // Every block is compared: a node's order is the event's, so a later
    // match would not prove the earlier ones. Four at a time, branch-free.
    while (m + 4 <= limit && ((h[m] ^ q[m]) | (h[m + 1] ^ q[m + 1]) | (h[m + 2] ^ q[m + 2]) |
                              (h[m + 3] ^ q[m + 3])) == 0) {
      m += 4;
    }
    while (m < limit && h[m] == q[m]) ++m;
    const bool alive = acc.Add(*node, k);
    if (k == 0) {
      // The rows' source records: fetch them while the walk goes on.
      acc.ForEachCandidate([&](uint32_t id) {
        __builtin_prefetch(sources_.record(id, std::memory_order_relaxed), 0, 3);
      });
    }
    k += m;
    if (!alive) break;
  }
  // Rows in result order: longest desc, then the source's rank.
  thread_local uint32_t ids[kMaxSources];
  RowOrder& order = RowOrder::ThreadLocal();
  order.Clear();
  size_t rows = 0;
  acc.Finish(k, [&](uint32_t slot, uint32_t id, uint32_t longest) {
    ids[slot] = id;
    order.Add(longest, sources_.rank(id), slot);
    ++rows;
  });
  out->reserve(rows);
  order.ForEach([&](uint32_t slot) {
    const SourceRecord* rec = sources_.record(ids[slot], std::memory_order_acquire);
    if (rec == nullptr) return;  // cleared meanwhile; validation fails and retries
    acc.Emplace(slot, rec->key, out);
  });
}

void ModelIndex::AddStats(IndexStats* stats) const {
  for (int t = 0; t < kNumTiers; ++t)
    stats->entries[t] += entries_[t].load(std::memory_order_relaxed);
  stats->digest += digest_.load(std::memory_order_relaxed);
  stats->sources += sources_with_entries_.load(std::memory_order_relaxed);
  stats->events_over_source_limit += over_source_limit_.load(std::memory_order_relaxed);
}

void ModelIndex::AppendSources(std::vector<SourceInfo>* out) const {
  grace_.Enter();
  const uint32_t limit = sources_.limit();
  for (uint32_t id = 0; id < limit; ++id) {
    const SourceRecord* rec = sources_.record(id, std::memory_order_acquire);
    if (rec == nullptr) continue;
    SourceInfo info;
    uint64_t total = 0;
    for (int t = 0; t < kNumTiers; ++t) {
      info.entries[t] = rec->entries[t].load(std::memory_order_relaxed);
      total += info.entries[t];
    }
    if (total == 0) continue;
    info.model = model_;
    info.source = rec->key;
    out->push_back(std::move(info));
  }
  grace_.Exit();
}

}  // namespace kvindex::index::internal
