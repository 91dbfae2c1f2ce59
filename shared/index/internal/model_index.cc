#include "shared/index/internal/model_index.h"

#include <algorithm>
#include <bit>
#include <mutex>

#include "shared/index/internal/entry_digest.h"

namespace kvindex::index::internal {
namespace {

constexpr size_t kInitialCapacity = 1024;
// Removals run in brackets of this many blocks: a reader waits for at most
// one bracket, and a long removed event does not fail every overlapping read.
constexpr size_t kRemovalChunk = 32;
// Validated attempts before a reader falls back to the seqlock's mutex.
constexpr int kReadAttempts = 4;
// Pause iterations (~40-140 cycles each) a reader spins before blocking.
constexpr int kMaxSpins = 4096;
// Probes are prefetched this many blocks ahead of use.
constexpr size_t kPrefetchDistance = 16;

size_t RecordBytes(const SourceRecord& rec) {
  auto heap = [](const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; };
  return sizeof(SourceRecord) + heap(rec.key.worker) + heap(rec.digest_prefix);
}

// Bit-sliced counters: plane j holds bit j of a per-source count, so one add
// updates the counts of all 56 sources of a group in a few word operations.
inline void SlicedAdd(uint64_t* planes, int num_planes, uint64_t mask) {
  for (int j = 0; mask != 0 && j < num_planes; ++j) {
    const uint64_t carry = planes[j] & mask;
    planes[j] ^= mask;
    mask = carry;
  }
}

inline uint32_t SlicedGet(const uint64_t* planes, int num_planes, int bit) {
  uint32_t v = 0;
  for (int j = 0; j < num_planes; ++j) v |= static_cast<uint32_t>((planes[j] >> bit) & 1) << j;
  return v;
}

// Per-thread query scratch, reused so a query allocates only its result.
struct MatchScratch {
  std::vector<uint64_t> acc;     // [group][tier] holder bits of the current block
  std::vector<uint64_t> alive;   // [group] holders of every block so far
  std::vector<uint64_t> dev;     // [group] device holders of every block so far
  std::vector<uint64_t> ever;    // [group] holders of block 0
  std::vector<uint64_t> planes;  // [group][tier][plane]
  std::vector<uint32_t> longest;
  std::vector<uint32_t> device_prefix;
};

MatchScratch& Scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

ModelIndex::ModelIndex(std::string model, MemoryCounter* memory)
    : model_(std::move(model)),
      memory_(memory),
      table_(new BlockTable(kInitialCapacity, memory)),
      ids_(0, absl::Hash<SourceKey>(), std::equal_to<SourceKey>(),
           CountingAllocator<std::pair<const SourceKey, uint32_t>>(memory)),
      free_ids_(CountingAllocator<uint32_t>(memory)),
      records_(new std::atomic<SourceRecord*>[kMaxSources]) {
  for (uint32_t i = 0; i < kMaxSources; ++i) records_[i].store(nullptr, std::memory_order_relaxed);
  table_.load(std::memory_order_relaxed)->set_versions(&versions_);
  memory_->Add(sizeof(std::atomic<SourceRecord*>) * kMaxSources + sizeof(ModelIndex) +
               LineVersions::kBytes);
}

ModelIndex::~ModelIndex() {
  delete table_.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < kMaxSources; ++i) {
    SourceRecord* rec = records_[i].load(std::memory_order_relaxed);
    if (rec != nullptr) {
      memory_->Sub(RecordBytes(*rec));
      delete rec;
    }
  }
  memory_->Sub(sizeof(std::atomic<SourceRecord*>) * kMaxSources + sizeof(ModelIndex) +
               LineVersions::kBytes);
}

void ModelIndex::SetBlockSize(uint32_t block_size) {
  if (block_size != 0) block_size_.store(block_size, std::memory_order_release);
}

SourceRecord* ModelIndex::FindSource(const SourceKey& source) const {
  auto it = ids_.find(source);
  if (it == ids_.end()) return nullptr;
  return records_[it->second].load(std::memory_order_relaxed);
}

SourceRecord* ModelIndex::FindOrAddSource(const SourceKey& source) {
  if (SourceRecord* rec = FindSource(source)) return rec;
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = id_limit_.load(std::memory_order_relaxed);
    if (id >= kMaxSources) return nullptr;
  }
  auto* rec = new SourceRecord;
  rec->key = source;
  rec->digest_prefix = DigestPrefix(model_, source);
  rec->id = id;
  memory_->Add(RecordBytes(*rec));
  ids_.emplace(source, id);
  // Publish the record before any bit of its id can appear in the table.
  records_[id].store(rec, std::memory_order_release);
  if (id + 1 > id_limit_.load(std::memory_order_relaxed)) {
    id_limit_.store(id + 1, std::memory_order_release);
  }
  return rec;
}

void ModelIndex::CountDelta(SourceRecord* rec, Tier tier, int64_t delta) {
  if (delta == 0) return;
  const int t = static_cast<int>(tier);
  rec->entries[t].fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  entries_[t].fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  const uint64_t before = rec->total;
  rec->total += static_cast<uint64_t>(delta);
  if (before == 0 && rec->total != 0) sources_with_entries_.fetch_add(1, std::memory_order_relaxed);
  if (before != 0 && rec->total == 0) sources_with_entries_.fetch_sub(1, std::memory_order_relaxed);
}

void ModelIndex::Store(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes) {
  SourceRecord* rec = FindOrAddSource(source);
  if (rec == nullptr || hashes.empty()) return;
  const uint64_t tag = MakeTag(static_cast<uint32_t>(tier), rec->id / kGroupBits);
  const uint64_t bit = uint64_t{1} << (rec->id % kGroupBits);
  BlockTable* table = table_.load(std::memory_order_relaxed);
  uint64_t digest = 0;
  int64_t added = 0;
  const size_t n = hashes.size();
  for (size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) table->PrefetchForWrite(hashes[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) table->PrefetchForWrite(hashes[i + kPrefetchDistance]);
    if (table->Full()) {
      Rebuild(table->used() * 2, nullptr, {});
      table = table_.load(std::memory_order_relaxed);
    }
    if (table->SetHolder(hashes[i], tag, bit)) {
      ++added;
      digest += EntryDigest(rec->digest_prefix, tier, hashes[i]);
    }
  }
  digest_.fetch_add(digest, std::memory_order_relaxed);
  CountDelta(rec, tier, added);
}

void ModelIndex::Remove(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes) {
  SourceRecord* rec = FindSource(source);
  if (rec == nullptr || hashes.empty()) return;
  const uint64_t tag = MakeTag(static_cast<uint32_t>(tier), rec->id / kGroupBits);
  const uint64_t bit = uint64_t{1} << (rec->id % kGroupBits);
  BlockTable* table = table_.load(std::memory_order_relaxed);
  uint64_t digest = 0;
  int64_t removed = 0;
  const size_t n = hashes.size();
  for (size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) table->PrefetchForWrite(hashes[i]);
  for (size_t start = 0; start < n; start += kRemovalChunk) {
    const size_t end = std::min(n, start + kRemovalChunk);
    seqlock_.LockRemovals();
    for (size_t i = start; i < end; ++i) {
      if (i + kPrefetchDistance < n) table->PrefetchForWrite(hashes[i + kPrefetchDistance]);
      if (table->ClearHolder(hashes[i], tag, bit)) {
        ++removed;
        digest += EntryDigest(rec->digest_prefix, tier, hashes[i]);
      }
    }
    versions_.Release();
    seqlock_.UnlockRemovals();
  }
  digest_.fetch_sub(digest, std::memory_order_relaxed);
  CountDelta(rec, tier, -removed);
}

void ModelIndex::ClearSource(const SourceKey& source) {
  auto it = ids_.find(source);
  if (it == ids_.end()) return;
  ClearIds({it->second});
}

void ModelIndex::ClearWorker(std::string_view worker) {
  std::vector<uint32_t> ids;
  for (const auto& [key, id] : ids_) {
    if (key.worker == worker) ids.push_back(id);
  }
  if (!ids.empty()) ClearIds(ids);
}

void ModelIndex::ClearIds(const std::vector<uint32_t>& ids) {
  uint64_t drop[kMaxGroups] = {};
  bool any_entries = false;
  for (uint32_t id : ids) {
    drop[id / kGroupBits] |= uint64_t{1} << (id % kGroupBits);
    any_entries |= records_[id].load(std::memory_order_relaxed)->total != 0;
  }
  BlockTable* table = table_.load(std::memory_order_relaxed);
  // A source without entries has no bits in the table: only its id is freed,
  // still inside a bracket so no reader pairs the id with a stale record.
  Rebuild(any_entries ? table->capacity() : 0, drop, ids);
}

void ModelIndex::Rebuild(size_t capacity, const uint64_t* drop,
                         const std::vector<uint32_t>& retire_ids) {
  BlockTable* old = table_.load(std::memory_order_relaxed);
  std::unique_ptr<BlockTable> fresh;
  uint64_t digest = 0;
  if (capacity != 0) {
    fresh = std::make_unique<BlockTable>(capacity, memory_);
    for (size_t i = 0; i < old->capacity(); ++i) {
      const Slot& s = old->slot(i);
      uint64_t word = s.word.load(std::memory_order_relaxed);
      if (word == 0) continue;
      const uint64_t key = s.key.load(std::memory_order_relaxed);
      if (drop != nullptr) {
        const uint32_t group = TagGroup(word);
        uint64_t gone = word & drop[group];
        if (gone != 0) {
          const Tier tier = static_cast<Tier>(TagTier(word));
          word &= ~gone;
          for (; gone != 0; gone &= gone - 1) {
            const uint32_t id = group * kGroupBits + std::countr_zero(gone);
            SourceRecord* rec = records_[id].load(std::memory_order_relaxed);
            digest += EntryDigest(rec->digest_prefix, tier, key);
            CountDelta(rec, tier, -1);
          }
          if ((word & kHolderMask) == 0) continue;
        }
      }
      fresh->InsertFresh(key, word);
    }
  }
  std::vector<SourceRecord*> retired;
  if (fresh) fresh->set_versions(&versions_);
  seqlock_.Begin();
  if (fresh) table_.store(fresh.release(), std::memory_order_release);
  for (uint32_t id : retire_ids) {
    SourceRecord* rec = records_[id].load(std::memory_order_relaxed);
    retired.push_back(rec);
    records_[id].store(nullptr, std::memory_order_release);
    ids_.erase(rec->key);
    free_ids_.push_back(id);
  }
  seqlock_.End();
  digest_.fetch_sub(digest, std::memory_order_relaxed);
  grace_.Synchronize();
  if (capacity != 0) delete old;
  for (SourceRecord* rec : retired) {
    memory_->Sub(RecordBytes(*rec));
    delete rec;
  }
}

void ModelIndex::ForEachEntry(
    const std::function<void(const SourceKey&, Tier, uint64_t)>& fn) const {
  const BlockTable* table = table_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < table->capacity(); ++i) {
    const Slot& s = table->slot(i);
    const uint64_t word = s.word.load(std::memory_order_relaxed);
    if (word == 0) continue;
    const uint64_t key = s.key.load(std::memory_order_relaxed);
    const uint32_t group = TagGroup(word);
    const Tier tier = static_cast<Tier>(TagTier(word));
    for (uint64_t bits = word & kHolderMask; bits != 0; bits &= bits - 1) {
      const uint32_t id = group * kGroupBits + std::countr_zero(bits);
      fn(records_[id].load(std::memory_order_relaxed)->key, tier, key);
    }
  }
}

void ModelIndex::Match(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out) const {
  out->clear();
  if (seq.empty()) return;
  thread_local ReadLog log;
  const uint32_t phase = grace_.Enter();
  bool done = false;
  for (int attempt = 0; attempt < kReadAttempts && !done; ++attempt) {
    // A swap bracket is short: wait it out by spinning rather than spending
    // an attempt or sleeping on the mutex.
    uint64_t begin = seqlock_.ReadBegin();
    for (int spin = 0; (begin & 1) != 0 && spin < kMaxSpins; ++spin) {
      __builtin_ia32_pause();
      begin = seqlock_.ReadBegin();
    }
    if (begin & 1) continue;
    log.Clear();
    MatchOnce(seq, out, &log);
    // ReadValidate's acquire fence orders every line read before the rechecks.
    done = !log.conflict && seqlock_.ReadValidate(begin);
    for (size_t i = 0; done && i < log.entries.size(); ++i) {
      const uint64_t e = log.entries[i];
      done = versions_.Unchanged(e >> 32, static_cast<uint32_t>(e));
    }
  }
  if (!done) {
    // Bounded wait: the writer holds the mutex for one removal chunk at most.
    // Spin first: a futex sleep costs a scheduler wake-up on a busy machine.
    bool locked = false;
    for (int spin = 0; spin < kMaxSpins && !locked; ++spin) {
      locked = seqlock_.fallback_mu.try_lock();
      if (!locked) __builtin_ia32_pause();
    }
    if (!locked) seqlock_.fallback_mu.lock();
    MatchOnce(seq, out, nullptr);
    seqlock_.fallback_mu.unlock();
  }
  grace_.Exit(phase);
}

void ModelIndex::MatchOnce(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out,
                           ReadLog* log) const {
  out->clear();
  const BlockTable* table = table_.load(std::memory_order_acquire);
  const uint32_t id_limit = id_limit_.load(std::memory_order_acquire);
  const uint32_t groups = std::max<uint32_t>(1, (id_limit + kGroupBits - 1) / kGroupBits);
  const size_t n = seq.size();
  const int num_planes = std::bit_width(n);
  if (groups == 1) return MatchFewGroups<1>(table, seq, num_planes, out, log);
  if (groups == 2) return MatchFewGroups<2>(table, seq, num_planes, out, log);

  MatchScratch& sc = Scratch();
  sc.acc.assign(groups * kNumTiers, 0);
  sc.alive.assign(groups, 0);
  sc.dev.assign(groups, 0);
  sc.ever.assign(groups, 0);
  sc.planes.assign(static_cast<size_t>(groups) * kNumTiers * num_planes, 0);
  if (sc.longest.size() < groups * kGroupBits) {
    sc.longest.resize(groups * kGroupBits);
    sc.device_prefix.resize(groups * kGroupBits);
  }

  for (size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) table->Prefetch(seq[i]);
  size_t k = 0;
  for (; k < n; ++k) {
    if (k + kPrefetchDistance < n) table->Prefetch(seq[k + kPrefetchDistance]);
    const uint64_t hash = seq[k];
    std::fill(sc.acc.begin(), sc.acc.end(), 0);
    // One probe run holds every (tier, group) slot of this block.
    table->CollectHolders(hash, groups, sc.acc.data(), &versions_, log);
    uint64_t live = 0;
    for (uint32_t g = 0; g < groups; ++g) {
      const uint64_t* a = &sc.acc[g * kNumTiers];
      const uint64_t d = a[0], h = a[1], s = a[2], e = a[3];
      const uint64_t any = d | h | s | e;
      if (k == 0) {
        sc.ever[g] = sc.alive[g] = any;
        sc.dev[g] = d;
        for (uint64_t b = any & ~d; b != 0; b &= b - 1) {
          sc.device_prefix[g * kGroupBits + std::countr_zero(b)] = 0;
        }
      } else {
        for (uint64_t b = sc.alive[g] & ~any; b != 0; b &= b - 1) {
          sc.longest[g * kGroupBits + std::countr_zero(b)] = static_cast<uint32_t>(k);
        }
        for (uint64_t b = sc.dev[g] & ~d; b != 0; b &= b - 1) {
          sc.device_prefix[g * kGroupBits + std::countr_zero(b)] = static_cast<uint32_t>(k);
        }
        sc.alive[g] &= any;
        sc.dev[g] &= d;
      }
      const uint64_t alive = sc.alive[g];
      if (alive == 0) continue;
      uint64_t* planes = &sc.planes[static_cast<size_t>(g) * kNumTiers * num_planes];
      // Fastest tier wins: each alive source's block counts in exactly one tier.
      SlicedAdd(planes, num_planes, alive & d);
      SlicedAdd(planes + num_planes, num_planes, alive & h & ~d);
      SlicedAdd(planes + 2 * num_planes, num_planes, alive & s & ~d & ~h);
      SlicedAdd(planes + 3 * num_planes, num_planes, alive & e & ~d & ~h & ~s);
      live |= alive;
    }
    if (live == 0) break;
  }

  for (uint32_t g = 0; g < groups; ++g) {
    for (uint64_t b = sc.ever[g]; b != 0; b &= b - 1) {
      const int bit = std::countr_zero(b);
      const uint32_t id = g * kGroupBits + bit;
      const SourceRecord* rec = records_[id].load(std::memory_order_acquire);
      if (rec == nullptr) continue;  // cleared meanwhile; validation fails and retries
      const uint64_t* planes = &sc.planes[static_cast<size_t>(g) * kNumTiers * num_planes];
      WorkerMatch row;
      row.source = rec->key;
      row.longest = (sc.alive[g] >> bit & 1) ? static_cast<uint32_t>(k) : sc.longest[id];
      row.device_prefix = (sc.dev[g] >> bit & 1) ? static_cast<uint32_t>(k) : sc.device_prefix[id];
      row.device = SlicedGet(planes, num_planes, bit);
      row.host = SlicedGet(planes + num_planes, num_planes, bit);
      row.disk = SlicedGet(planes + 2 * num_planes, num_planes, bit);
      row.external = SlicedGet(planes + 3 * num_planes, num_planes, bit);
      out->push_back(std::move(row));
    }
  }
}

// The common case (<= 112 sources, one or two holder groups): every
// per-source state lives in registers and small stack arrays; one probe run
// per block, prefetched ahead.
template <uint32_t G>
void ModelIndex::MatchFewGroups(const BlockTable* table, std::span<const uint64_t> seq,
                                int num_planes, std::vector<WorkerMatch>* out, ReadLog* log) const {
  const size_t n = seq.size();
  uint64_t planes[G][kNumTiers][64];
  for (uint32_t g = 0; g < G; ++g) {
    for (int t = 0; t < kNumTiers; ++t) std::fill_n(planes[g][t], num_planes, 0);
  }
  uint32_t longest[G * kGroupBits];
  uint32_t device_prefix[G * kGroupBits];
  uint64_t alive[G] = {}, dev[G] = {}, ever[G] = {};
  for (size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) table->Prefetch(seq[i]);
  size_t k = 0;
  for (; k < n; ++k) {
    if (k + kPrefetchDistance < n) table->Prefetch(seq[k + kPrefetchDistance]);
    // Slots of a group created after this query began are ignored.
    uint64_t acc[G * kNumTiers] = {};
    table->CollectHolders(seq[k], G, acc, &versions_, log);
    uint64_t live = 0;
    for (uint32_t g = 0; g < G; ++g) {
      const uint64_t d = acc[g * kNumTiers], h = acc[g * kNumTiers + 1];
      const uint64_t sd = acc[g * kNumTiers + 2], e = acc[g * kNumTiers + 3];
      const uint64_t any = d | h | sd | e;
      uint32_t* lg = &longest[g * kGroupBits];
      uint32_t* dp = &device_prefix[g * kGroupBits];
      if (k == 0) {
        ever[g] = alive[g] = any;
        dev[g] = d;
        for (uint64_t b = any & ~d; b != 0; b &= b - 1) dp[std::countr_zero(b)] = 0;
      } else {
        for (uint64_t b = alive[g] & ~any; b != 0; b &= b - 1) {
          lg[std::countr_zero(b)] = static_cast<uint32_t>(k);
        }
        for (uint64_t b = dev[g] & ~d; b != 0; b &= b - 1) {
          dp[std::countr_zero(b)] = static_cast<uint32_t>(k);
        }
        alive[g] &= any;
        dev[g] &= d;
      }
      const uint64_t a = alive[g];
      if (a == 0) continue;
      // Fastest tier wins: each alive source's block counts in exactly one tier.
      SlicedAdd(planes[g][0], num_planes, a & d);
      SlicedAdd(planes[g][1], num_planes, a & h & ~d);
      SlicedAdd(planes[g][2], num_planes, a & sd & ~d & ~h);
      SlicedAdd(planes[g][3], num_planes, a & e & ~d & ~h & ~sd);
      live |= a;
    }
    if (live == 0) break;
  }
  size_t rows = 0;
  for (uint32_t g = 0; g < G; ++g) rows += std::popcount(ever[g]);
  out->reserve(rows);
  for (uint32_t g = 0; g < G; ++g) {
    for (uint64_t b = ever[g]; b != 0; b &= b - 1) {
      const int bit = std::countr_zero(b);
      const uint32_t id = g * kGroupBits + bit;
      const SourceRecord* rec = records_[id].load(std::memory_order_acquire);
      if (rec == nullptr) continue;  // cleared meanwhile; validation fails and retries
      WorkerMatch row;
      row.source = rec->key;
      row.longest = (alive[g] >> bit & 1) ? static_cast<uint32_t>(k) : longest[id];
      row.device_prefix = (dev[g] >> bit & 1) ? static_cast<uint32_t>(k) : device_prefix[id];
      row.device = SlicedGet(planes[g][0], num_planes, bit);
      row.host = SlicedGet(planes[g][1], num_planes, bit);
      row.disk = SlicedGet(planes[g][2], num_planes, bit);
      row.external = SlicedGet(planes[g][3], num_planes, bit);
      out->push_back(std::move(row));
    }
  }
}

void ModelIndex::AddStats(IndexStats* stats) const {
  for (int t = 0; t < kNumTiers; ++t)
    stats->entries[t] += entries_[t].load(std::memory_order_relaxed);
  stats->digest += digest_.load(std::memory_order_relaxed);
  stats->sources += sources_with_entries_.load(std::memory_order_relaxed);
}

void ModelIndex::AppendSources(std::vector<SourceInfo>* out) const {
  const uint32_t phase = grace_.Enter();
  const uint32_t limit = id_limit_.load(std::memory_order_acquire);
  for (uint32_t id = 0; id < limit; ++id) {
    const SourceRecord* rec = records_[id].load(std::memory_order_acquire);
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
  grace_.Exit(phase);
}

}  // namespace kvindex::index::internal
