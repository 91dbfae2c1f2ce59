#include "shared/index/internal/model_index.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "shared/index/internal/entry_digest.h"

namespace kvindex::index::internal {

// A locator entry names every node the arena can hold and every offset a
// node can have.
static_assert((uint64_t{NodeArena::kMaxChunks} << NodeArena::kUnitBits) <=
                  uint64_t{1} << BlockLocator::kRefBits,
              "arena references must fit the locator's reference field");
static_assert(kMaxNodeBlocks <= uint64_t{1} << BlockLocator::kOffsetBits,
              "node offsets must fit the locator's offset field");

namespace {

constexpr size_t kInitialCapacity = 1024;
// Locator probes are prefetched this many blocks ahead of use.
constexpr size_t kPrefetchDistance = 16;
// Retired nodes are freed in batches: one grace period per batch.
constexpr size_t kRetireBatch = 512;
constexpr size_t kRetireBytes = size_t{4} << 20;
// A node whose live blocks fill less than half of a capacity of at least
// this many blocks is copied into a tight one.
constexpr uint32_t kCompactMinCapacity = 32;
// Share of the memory limits new entries leave to removals' splits, so a
// removal past the limit for new entries rarely has to clear its source.
constexpr uint32_t kReserveChunksDivisor = 64;
constexpr uint64_t kReserveBytesDivisor = 32;

}  // namespace

std::unique_ptr<ModelIndex> ModelIndex::Create(std::string model, MemoryCounter* memory,
                                               const ModelLimits& limits) {
  std::unique_ptr<BlockLocator> locator = BlockLocator::Create(kInitialCapacity, memory);
  if (locator == nullptr) return nullptr;
  return std::make_unique<ModelIndex>(std::move(model), memory, limits, std::move(locator));
}

ModelIndex::ModelIndex(std::string model, MemoryCounter* memory, const ModelLimits& limits,
                       std::unique_ptr<BlockLocator> locator)
    : model_(std::move(model)),
      memory_(memory),
      limits_(limits),
      arena_(memory, limits.max_chunks),
      nodes_(CountingAllocator<ChainNode*>(memory)),
      locator_(locator.release()),
      sources_(memory, limits.max_sources) {
  memory_->Add(sizeof(ModelIndex));
}

ModelIndex::~ModelIndex() {
  for (SourceRecord* rec : retired_sources_) sources_.Destroy(rec);
  delete locator_.load(std::memory_order_relaxed);
  for (ChainNode* node : nodes_) ChainNode::Destroy(node);
  memory_->Sub(sizeof(ModelIndex));
}

void ModelIndex::SetBlockSize(uint32_t block_size) {
  if (block_size != 0) block_size_.store(block_size, std::memory_order_release);
}

// ---------------------------------------------------------------- sources

SourceRecord* ModelIndex::FindOrAddSource(const SourceKey& source) {
  if (SourceRecord* rec = sources_.Find(source)) return rec;
  SourceRecord* rec = sources_.Add(source, DigestPrefix(model_, source));
  if (rec == nullptr) return nullptr;
  seqlock_.Begin();
  sources_.Rank(rec->id);
  seqlock_.End();
  return rec;
}

void ModelIndex::ReleaseEmptySource(SourceRecord* rec) {
  // No node holds the id (its counts are 0); a reader that read a bit of it
  // before fails validation across the bracket, so it never pairs the id
  // with the record of a source that reuses it.
  seqlock_.Begin();
  retired_sources_.push_back(sources_.Release(rec->id));
  seqlock_.End();
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

uint64_t ModelIndex::DigestRange(const SourceRecord* rec, Tier tier, const ChainNode* node,
                                 uint32_t lo, uint32_t hi) const {
  return EntryDigestSum(rec->digest_prefix, tier, node->hashes() + lo, hi - lo);
}

// ---------------------------------------------------------------- lookups

bool ModelIndex::HashIs(uint32_t ref, uint32_t offset, uint64_t hash) const {
  const ChainNode* node = NodeAt(ref);
  return offset < node->capacity && node->hashes()[offset] == hash;
}

bool ModelIndex::Locate(uint64_t hash, BlockRef* ref, size_t* slot) const {
  uint64_t value = 0;
  const size_t i = locator()->Probe(
      hash, [&](uint32_t id, uint32_t off) { return HashIs(id, off, hash); }, &value);
  if (i == BlockLocator::kNotFound || value == 0) return false;
  ref->node = const_cast<ChainNode*>(NodeAt(BlockLocator::NodeRef(value)));
  ref->offset = BlockLocator::Offset(value);
  if (slot != nullptr) *slot = i;
  return true;
}

size_t ModelIndex::SlotOf(uint64_t hash) const {
  BlockRef ref;
  size_t slot = BlockLocator::kNotFound;
  Locate(hash, &ref, &slot);
  return slot;
}

// ---------------------------------------------------------------- nodes

uint64_t ModelIndex::NewEntryBudget() const {
  const uint64_t reserve =
      std::max<uint64_t>(NodeArena::kChunkBytes, limits_.max_bytes / kReserveBytesDivisor);
  return limits_.max_bytes > reserve ? limits_.max_bytes - reserve : 0;
}

uint32_t ModelIndex::ChunkLimit(Purpose purpose) const {
  const uint32_t max = arena_.max_chunks();
  const bool entries = purpose == Purpose::kNewEntries;
  uint64_t limit = max;
  if (entries) limit -= std::min(max, std::max<uint32_t>(1, max / kReserveChunksDivisor));
  if (limits_.max_bytes != 0) {
    const uint64_t budget = entries ? NewEntryBudget() : limits_.max_bytes;
    const uint64_t table = locator()->mapped_bytes();
    limit = std::min(limit, budget > table ? (budget - table) / NodeArena::kChunkBytes : 0);
  }
  return static_cast<uint32_t>(limit);
}

uint64_t ModelIndex::limited_bytes() const {
  return arena_.mapped_bytes() + locator()->mapped_bytes();
}

ChainNode* ModelIndex::AllocNode(uint32_t num_groups, uint32_t capacity, Purpose purpose) {
  size_t bytes = 0;
  NodeArena::Ref ref = 0;
  void* memory =
      arena_.Allocate(ChainNode::Bytes(num_groups, capacity), &bytes, &ref, ChunkLimit(purpose));
  if (memory == nullptr) return nullptr;
  ChainNode* node = ChainNode::Create(memory, ref, num_groups, capacity);
  // Not part of an open capture (it began before this node).
  node->capture().store(capture_.born(), std::memory_order_relaxed);
  return node;
}

void ModelIndex::Adopt(ChainNode* node) {
  node->index = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back(node);
}

void ModelIndex::Discard(ChainNode* node) {
  const size_t bytes = NodeBytes(node);
  ChainNode::Destroy(node);
  arena_.Free(node, bytes);  // never published: no reader can hold it
}

size_t ModelIndex::NodeBytes(const ChainNode* node) {
  return NodeArena::ClassBytes(ChainNode::Bytes(node->num_groups, node->capacity));
}

ChainNode* ModelIndex::AllocCopy(const ChainNode* node, uint32_t lo, uint32_t hi, int extra_group,
                                 Purpose purpose) {
  uint32_t num_groups = 0;
  bool has_extra = extra_group < 0;
  for (uint32_t g = 0; g < node->num_groups; ++g) {
    const HolderGroup& hg = node->group(g);
    if (hg.Any() == 0 && hg.group != static_cast<uint32_t>(extra_group)) continue;
    ++num_groups;
    has_extra |= hg.group == static_cast<uint32_t>(extra_group);
  }
  if (!has_extra) ++num_groups;
  return AllocNode(num_groups, hi - lo, purpose);
}

// `copy` comes from AllocCopy with the same arguments, and `node`'s holder
// bits have not changed since (the group count depends on them).
ChainNode* ModelIndex::CopyRange(const ChainNode* node, uint32_t lo, uint32_t hi, int extra_group,
                                 ChainNode* copy) {
  Adopt(copy);
  bool has_extra = extra_group < 0;
  uint32_t out = 0;
  for (uint32_t g = 0; g < node->num_groups; ++g) {
    const HolderGroup& hg = node->group(g);
    if (hg.Any() == 0 && hg.group != static_cast<uint32_t>(extra_group)) continue;
    HolderGroup& dst = copy->group(out++);
    dst.group = hg.group;
    has_extra |= hg.group == static_cast<uint32_t>(extra_group);
    for (int t = 0; t < kNumTiers; ++t) {
      dst.tiers[t].store(hg.tiers[t].load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
  }
  if (!has_extra) copy->group(out).group = static_cast<uint32_t>(extra_group);
  std::memcpy(copy->hashes(), node->hashes() + lo, size_t{hi - lo} * 8);
  copy->end.store(hi - lo, std::memory_order_relaxed);
  // Point the moved blocks at the copy; until `node` shrinks, both hold them
  // with the same holders, so a reader may use either.
  BlockLocator* loc = locator();
  const uint64_t* h = node->hashes();
  for (uint32_t x = lo; x < std::min(hi, lo + static_cast<uint32_t>(kPrefetchDistance)); ++x) {
    loc->PrefetchForWrite(h[x]);
  }
  for (uint32_t x = lo; x < hi; ++x) {
    if (x + kPrefetchDistance < hi) loc->PrefetchForWrite(h[x + kPrefetchDistance]);
    const size_t slot = SlotOf(h[x]);
    loc->Relabel(slot, copy->ref, x - lo);
  }
  return copy;
}

void ModelIndex::Shrink(ChainNode* node, uint32_t begin, uint32_t end) {
  Preserve(node);
  node->BeginWrite();
  node->begin.store(begin, std::memory_order_relaxed);
  node->end.store(end, std::memory_order_relaxed);
  node->EndWrite();
  if (begin == end) {
    retired_.push_back(node);
    retired_bytes_ += NodeBytes(node);
  }
}

void ModelIndex::MaybeCompact(ChainNode* node) {
  const uint32_t size = node->size();
  if (size == 0 || node->capacity < kCompactMinCapacity || size * 2 >= node->capacity) return;
  const uint32_t begin = node->begin.load(std::memory_order_relaxed);
  // Optional: without memory the node keeps its unused capacity.
  ChainNode* copy = AllocCopy(node, begin, begin + size, -1, Purpose::kNewEntries);
  if (copy == nullptr) return;
  CopyRange(node, begin, begin + size, -1, copy);
  Shrink(node, begin, begin);
}

ChainNode* ModelIndex::Carve(ChainNode* node, uint32_t lo, uint32_t hi, int need_group,
                             Purpose purpose) {
  const uint32_t b = node->begin.load(std::memory_order_relaxed);
  const uint32_t e = node->end.load(std::memory_order_relaxed);
  const bool has_group = need_group < 0 || node->FindGroup(need_group) != nullptr;
  if (lo == b && hi == e && has_group) return node;
  // Keep the longest part in place (the middle only if it needs no new
  // group); copy the others.
  const uint32_t pre = lo - b, mid = hi - lo, suf = e - hi;
  enum { kNone, kPre, kMid, kSuf } keep = kNone;
  if (has_group && mid >= pre && mid >= suf) {
    keep = kMid;
  } else if (pre > 0 && pre >= suf) {
    keep = kPre;
  } else if (suf > 0) {
    keep = kSuf;
  }
  const bool copy_mid = keep != kMid, copy_pre = keep != kPre && pre > 0,
             copy_suf = keep != kSuf && suf > 0;
  // Every copy before any change: the split happens completely or not at all.
  ChainNode* mid_copy = copy_mid ? AllocCopy(node, lo, hi, need_group, purpose) : nullptr;
  ChainNode* pre_copy = copy_pre ? AllocCopy(node, b, lo, -1, purpose) : nullptr;
  ChainNode* suf_copy = copy_suf ? AllocCopy(node, hi, e, -1, purpose) : nullptr;
  if ((copy_mid && mid_copy == nullptr) || (copy_pre && pre_copy == nullptr) ||
      (copy_suf && suf_copy == nullptr)) {
    for (ChainNode* copy : {mid_copy, pre_copy, suf_copy}) {
      if (copy != nullptr) Discard(copy);
    }
    return nullptr;
  }
  ChainNode* target = copy_mid ? CopyRange(node, lo, hi, need_group, mid_copy) : node;
  if (copy_pre) CopyRange(node, b, lo, -1, pre_copy);
  if (copy_suf) CopyRange(node, hi, e, -1, suf_copy);
  // The part kept in place, as [begin, end) of the node (empty: retired).
  const uint32_t kept[4][2] = {{b, b}, {b, lo}, {lo, hi}, {hi, e}};
  Shrink(node, kept[keep][0], kept[keep][1]);
  return target;
}

void ModelIndex::EraseRange(const ChainNode* node, uint32_t lo, uint32_t hi) {
  BlockLocator* loc = locator();
  const uint64_t* h = node->hashes();
  for (uint32_t x = lo; x < std::min(hi, lo + static_cast<uint32_t>(kPrefetchDistance)); ++x) {
    loc->PrefetchForWrite(h[x]);
  }
  erase_epoch_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (uint32_t x = lo; x < hi; ++x) {
    if (x + kPrefetchDistance < hi) loc->PrefetchForWrite(h[x + kPrefetchDistance]);
    loc->Erase(SlotOf(h[x]));
  }
  erase_epoch_.fetch_add(1, std::memory_order_release);
}

uint64_t ModelIndex::blocks() const { return locator()->used(); }

void ModelIndex::ProfileLocator(bool histograms, LocatorProfile* out) const {
  const BlockLocator* loc = locator();
  out->capacity = loc->capacity();
  out->used = loc->used();
  out->mapped_bytes = loc->mapped_bytes();
  out->growths = growths_;
  out->overflow_growths = overflow_growths_;
  out->displacement.clear();
  out->clusters.clear();
  out->tag_false_matches = 0;
  if (histograms) out->tag_false_matches = loc->Histograms(&out->displacement, &out->clusters);
}

bool ModelIndex::EnsureRoom(size_t blocks) {
  if (locator()->HasRoomFor(blocks)) return true;
  const double needed = static_cast<double>(locator()->used() + blocks);
  return Rebuild(static_cast<size_t>(needed / BlockLocator::kGrowLoad));
}

bool ModelIndex::Rebuild(size_t min_capacity) {
  BlockLocator* old = locator();
  std::unique_ptr<BlockLocator> fresh;
  for (size_t capacity = std::max(min_capacity, kInitialCapacity);; capacity *= 2) {
    // The locator grows only for new entries: held to their budget.
    if (limits_.max_bytes != 0 &&
        arena_.mapped_bytes() + BlockLocator::MappedBytes(capacity) > NewEntryBudget()) {
      return false;
    }
    fresh = BlockLocator::Create(capacity, memory_);
    if (fresh == nullptr) return false;
    // Each block's home line is prefetched kPrefetchDistance blocks ahead of
    // its insert: the inserts are random misses, and an insert is too many
    // instructions for the CPU to overlap many of them on its own.
    struct Pending {
      uint64_t hash;
      uint32_t ref, offset;
    };
    Pending ring[kPrefetchDistance];
    size_t queued = 0;
    bool ok = true;
    for (const ChainNode* node : nodes_) {
      const uint32_t e = node->end.load(std::memory_order_relaxed);
      for (uint32_t x = node->begin.load(std::memory_order_relaxed); ok && x < e; ++x) {
        Pending& p = ring[queued++ % kPrefetchDistance];
        if (queued > kPrefetchDistance) ok = fresh->Insert(p.hash, p.ref, p.offset);
        p = {node->hashes()[x], node->ref, x};
        fresh->PrefetchForWrite(p.hash);
      }
    }
    for (size_t k = queued > kPrefetchDistance ? queued - kPrefetchDistance : 0; ok && k < queued;
         ++k) {
      const Pending& p = ring[k % kPrefetchDistance];
      ok = fresh->Insert(p.hash, p.ref, p.offset);
    }
    if (ok) break;  // else a probe run overflowed: try twice the size
  }
  ++growths_;
  // The old table stays valid (and unchanged) for readers still using it.
  locator_.store(fresh.release(), std::memory_order_release);
  grace_.Synchronize();
  delete old;
  return true;
}

bool ModelIndex::RetiredBatchFull() const {
  return retired_.size() + retired_sources_.size() >= kRetireBatch ||
         retired_bytes_ >= kRetireBytes;
}

void ModelIndex::ReclaimRetired() {
  if (retired_.empty() && retired_sources_.empty()) return;
  grace_.Synchronize();
  FreeRetired();
}

void ModelIndex::FreeRetired() {
  capture_.Freeing(retired_);
  for (ChainNode* node : retired_) {
    const size_t bytes = NodeBytes(node);
    // Swap-remove from the node list.
    ChainNode* last = nodes_.back();
    nodes_[node->index] = last;
    last->index = node->index;
    nodes_.pop_back();
    ChainNode::Destroy(node);
    arena_.Free(node, bytes);
  }
  retired_.clear();
  retired_bytes_ = 0;
  for (SourceRecord* rec : retired_sources_) sources_.Destroy(rec);
  retired_sources_.clear();
}

// ---------------------------------------------------------------- writer

// Extends the run of hashes[i..] that continues at consecutive positions of
// `node` from `offset` (forward as stored events list blocks, or backward as
// leaf-first evictions do). Returns the index after the run; [*lo, *hi) is its
// range in the node.
static size_t ExtendRun(const ChainNode* node, uint32_t offset, std::span<const uint64_t> hashes,
                        size_t i, uint32_t* lo, uint32_t* hi) {
  const uint64_t* h = node->hashes();
  const uint32_t b = node->begin.load(std::memory_order_relaxed);
  const uint32_t e = node->end.load(std::memory_order_relaxed);
  size_t j = i + 1;
  uint32_t p = offset + 1;
  while (j < hashes.size() && p < e && h[p] == hashes[j]) ++j, ++p;
  if (j > i + 1) {
    *lo = offset;
    *hi = p;
    return j;
  }
  uint32_t q = offset;
  while (j < hashes.size() && q > b && h[q - 1] == hashes[j]) ++j, --q;
  *lo = q;
  *hi = offset + 1;
  return j;
}

size_t ModelIndex::Store(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes,
                         bool* over_source_limit) {
  if (hashes.empty()) return 0;
  SourceRecord* rec = FindOrAddSource(source);
  if (rec == nullptr) {
    over_source_limit_.fetch_add(1, std::memory_order_relaxed);
    *over_source_limit = true;
    return 0;
  }
  const size_t n = hashes.size();
  // A refused growth is not final: AppendNew grows for what is left of the
  // event when the room runs out.
  EnsureRoom(n);
  uint64_t digest = 0;
  int64_t added = 0;
  size_t i = 0;
  while (i < n) {
    BlockRef ref;
    if (Locate(hashes[i], &ref)) {
      uint32_t lo, hi;
      const size_t next = ExtendRun(ref.node, ref.offset, hashes, i, &lo, &hi);
      if (!AddHolder(ref.node, lo, hi, rec, tier, &digest, &added)) break;
      i = next;
    } else {
      bool full = false;
      i = AppendNew(rec, tier, hashes, i, &full, &digest, &added);
      if (full) break;
    }
  }
  digest_.fetch_add(digest, std::memory_order_relaxed);
  CountDelta(rec, tier, added);
  // A new source of which nothing fit holds no id.
  if (rec->total == 0) ReleaseEmptySource(rec);
  if (RetiredBatchFull()) ReclaimRetired();
  return n - i;
}

size_t ModelIndex::AppendNew(const SourceRecord* rec, Tier tier, std::span<const uint64_t> hashes,
                             size_t i, bool* full, uint64_t* digest, int64_t* added) {
  const size_t n = hashes.size();
  if (locator()->Room() == 0 && !EnsureRoom(n - i)) {
    *full = true;
    return i;
  }
  // At most what the locator takes without growing: placing a block never
  // fails for want of a slot.
  const size_t limit = std::min({n, i + kMaxNodeBlocks, i + locator()->Room()});
  // Sized for the rest of the event: new blocks usually run to its end.
  ChainNode* node = AllocNode(1, static_cast<uint32_t>(limit - i), Purpose::kNewEntries);
  if (node == nullptr) {
    *full = true;
    return i;
  }
  Adopt(node);
  HolderGroup& hg = node->group(0);
  hg.group = rec->id / kGroupBits;
  hg.tiers[static_cast<int>(tier)].store(uint64_t{1} << (rec->id % kGroupBits),
                                         std::memory_order_relaxed);
  for (size_t x = i; x < std::min(limit, i + kPrefetchDistance); ++x) {
    locator()->PrefetchForWrite(hashes[x]);
  }
  uint32_t len = 0;
  size_t x = i;
  for (; x < limit; ++x) {
    if (x + kPrefetchDistance < limit) locator()->PrefetchForWrite(hashes[x + kPrefetchDistance]);
    const uint64_t h = hashes[x];
    auto is_block = [&](uint32_t id, uint32_t off) { return HashIs(id, off, h); };
    uint64_t value = 0;
    size_t slot = locator()->Probe(h, is_block, &value);
    if (slot == BlockLocator::kNotFound) {
      // A probe run overflowed (`value` is then some other block's): grow
      // before the block becomes visible, so a refused growth leaves
      // nothing to undo.
      if (!Rebuild(2 * locator()->capacity())) {
        *full = true;
        break;
      }
      ++overflow_growths_;
      slot = locator()->Probe(h, is_block, &value);
      if (slot == BlockLocator::kNotFound) {
        *full = true;
        break;
      }
    }
    if (value != 0) {
      if (BlockLocator::NodeRef(value) == node->ref) continue;  // repeated within the run
      break;  // held elsewhere: the caller adds the holder there
    }
    node->hashes()[len] = h;
    // Extent first, slot second: a reader that finds the slot finds the block.
    node->end.store(len + 1, std::memory_order_release);
    locator()->Fill(slot, h, node->ref, len);
    ++len;
  }
  if (len == 0) {
    // Nothing placed (stopped at the first block): no slot names the node.
    nodes_.pop_back();
    Discard(node);
    return x;
  }
  *digest += EntryDigestSum(rec->digest_prefix, tier, node->hashes(), len);
  *added += len;
  MaybeCompact(node);  // the run ended early: do not keep the unused capacity
  return x;
}

bool ModelIndex::AddHolder(ChainNode* node, uint32_t lo, uint32_t hi, SourceRecord* rec, Tier tier,
                           uint64_t* digest, int64_t* added) {
  const uint32_t group = rec->id / kGroupBits;
  const uint64_t bit = uint64_t{1} << (rec->id % kGroupBits);
  const int t = static_cast<int>(tier);
  if (HolderGroup* hg = node->FindGroup(group);
      hg != nullptr && (hg->tiers[t].load(std::memory_order_relaxed) & bit) != 0) {
    return true;  // already held (set semantics)
  }
  // A new entry: its split is held to the new entries' limit.
  ChainNode* target = Carve(node, lo, hi, static_cast<int>(group), Purpose::kNewEntries);
  if (target == nullptr) return false;
  HolderGroup* hg = target->FindGroup(group);
  Preserve(target);
  hg->tiers[t].store(hg->tiers[t].load(std::memory_order_relaxed) | bit, std::memory_order_release);
  const uint32_t b = target->begin.load(std::memory_order_relaxed);
  const uint32_t e = target->end.load(std::memory_order_relaxed);
  *digest += DigestRange(rec, tier, target, b, e);
  *added += e - b;
  if (target != node) MaybeCompact(node);
  return true;
}

bool ModelIndex::Remove(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes) {
  SourceRecord* rec = sources_.Find(source);
  if (rec == nullptr || hashes.empty()) return true;
  uint64_t digest = 0;
  int64_t removed = 0;
  BlockLocator* loc = locator();
  const size_t n = hashes.size();
  for (size_t x = 0; x < std::min(n, kPrefetchDistance); ++x) loc->Prefetch(hashes[x]);
  size_t i = 0;
  bool split = true;
  while (i < n && split) {
    BlockRef ref;
    if (!Locate(hashes[i], &ref)) {
      if (i + kPrefetchDistance < n) loc->Prefetch(hashes[i + kPrefetchDistance]);
      ++i;
      continue;
    }
    uint32_t lo, hi;
    const size_t next = ExtendRun(ref.node, ref.offset, hashes, i, &lo, &hi);
    for (size_t x = i + kPrefetchDistance; x < std::min(n, next + kPrefetchDistance); ++x) {
      loc->Prefetch(hashes[x]);
    }
    // Fallback readers wait for at most this one run.
    seqlock_.LockRemovals();
    split = RemoveHolder(ref.node, lo, hi, rec, tier, &digest, &removed);
    seqlock_.UnlockRemovals();
    i = next;
  }
  digest_.fetch_sub(digest, std::memory_order_relaxed);
  CountDelta(rec, tier, -removed);
  if (!split) {
    // The source would keep blocks it no longer holds: it holds nothing
    // instead (clearing allocates no node).
    ClearIds({rec->id});
    return false;
  }
  // Its last entry removed: the id is free again, as after a clear.
  if (rec->total == 0) ReleaseEmptySource(rec);
  if (RetiredBatchFull()) ReclaimRetired();
  return true;
}

bool ModelIndex::RemoveHolder(ChainNode* node, uint32_t lo, uint32_t hi, SourceRecord* rec,
                              Tier tier, uint64_t* digest, int64_t* removed) {
  const uint32_t group = rec->id / kGroupBits;
  const uint64_t bit = uint64_t{1} << (rec->id % kGroupBits);
  const int t = static_cast<int>(tier);
  HolderGroup* hg = node->FindGroup(group);
  if (hg == nullptr || (hg->tiers[t].load(std::memory_order_relaxed) & bit) == 0) return true;
  bool others = false;
  for (uint32_t g = 0; g < node->num_groups && !others; ++g) {
    const HolderGroup& other = node->group(g);
    for (int x = 0; x < kNumTiers && !others; ++x) {
      uint64_t bits = other.tiers[x].load(std::memory_order_relaxed);
      if (&other == hg && x == t) bits &= ~bit;
      others = bits != 0;
    }
  }
  const uint64_t range_digest = DigestRange(rec, tier, node, lo, hi);
  if (!others) {
    // The blocks leave the index: erase their slots, then cut them out of
    // the node, keeping the longer remaining part in place.
    const uint32_t b = node->begin.load(std::memory_order_relaxed);
    const uint32_t e = node->end.load(std::memory_order_relaxed);
    const uint32_t pre = lo - b, suf = e - hi;
    ChainNode* copy = nullptr;
    if (pre != 0 && suf != 0) {
      copy = pre >= suf ? AllocCopy(node, hi, e, -1, Purpose::kRemoval)
                        : AllocCopy(node, b, lo, -1, Purpose::kRemoval);
      if (copy == nullptr) return false;
    }
    *digest += range_digest;
    *removed += hi - lo;
    Departed(node, lo, hi);
    EraseRange(node, lo, hi);
    if (pre == 0) {
      Shrink(node, hi, e);
    } else if (suf == 0) {
      Shrink(node, b, lo);
    } else if (pre >= suf) {
      CopyRange(node, hi, e, -1, copy);
      Shrink(node, b, lo);
    } else {
      CopyRange(node, b, lo, -1, copy);
      Shrink(node, hi, e);
    }
    MaybeCompact(node);
    return true;
  }
  ChainNode* target = Carve(node, lo, hi, -1, Purpose::kRemoval);
  if (target == nullptr) return false;
  *digest += range_digest;
  *removed += hi - lo;
  HolderGroup* thg = target->FindGroup(group);
  Preserve(target);
  target->BeginWrite();
  thg->tiers[t].store(thg->tiers[t].load(std::memory_order_relaxed) & ~bit,
                      std::memory_order_relaxed);
  target->EndWrite();
  if (target != node) MaybeCompact(node);
  return true;
}

void ModelIndex::Clear(std::span<const PlacementEvent> clears) {
  // The ids the run clears, each once (a worker's in id order, never in the
  // process's hash order). Which ids are freed decides which id a later
  // source takes (the lowest free one), hence its holder group, node sizes
  // and what fits under the memory limits: it depends on the log alone.
  std::vector<uint32_t> ids, worker_ids;
  uint64_t seen[kMaxGroups] = {};
  auto add = [&](uint32_t id) {
    uint64_t& word = seen[id / kGroupBits];
    const uint64_t bit = uint64_t{1} << (id % kGroupBits);
    if ((word & bit) != 0) return;
    word |= bit;
    ids.push_back(id);
  };
  for (const PlacementEvent& event : clears) {
    if (event.kind == PlacementKind::kCleared) {
      if (!event.model.empty() && event.model != model_) continue;
      if (const SourceRecord* rec = sources_.Find(event.source)) add(rec->id);
    } else if (event.kind == PlacementKind::kWorkerExpired) {
      worker_ids.clear();
      sources_.ForEach([&](const SourceKey& key, uint32_t id) {
        if (key.worker == event.source.worker) worker_ids.push_back(id);
      });
      std::sort(worker_ids.begin(), worker_ids.end());
      for (uint32_t id : worker_ids) add(id);
    }
  }
  if (!ids.empty()) ClearIds(ids);
}

namespace {
// A hold of the removal lock inside a clear ends after this many nodes
// (kClearNodesPerLockHold) or once this many blocks' locator slots were
// erased, whichever comes first (always at least one node).
constexpr uint32_t kClearBlocksPerLockHold = 8192;
}  // namespace

void ModelIndex::ClearIds(const std::vector<uint32_t>& ids) {
  uint64_t drop[kMaxGroups] = {};
  for (uint32_t id : ids) drop[id / kGroupBits] |= uint64_t{1} << (id % kGroupBits);
  if (clear_observer_ != nullptr) clear_observer_->OnClearPass(model_, ids.size());
  // Counts and digest first, outside the lock: only this thread changes
  // holder bits. Readers see each node change inside its version bracket,
  // so between two holds they see some nodes without the sources and the
  // rest with them: a state between the one before the clear and the one
  // after, never more than before (a clear only takes away).
  uint64_t digest = 0;
  std::vector<ChainNode*> touched;
  for (ChainNode* node : nodes_) {
    if (node->size() == 0) continue;
    const uint32_t b = node->begin.load(std::memory_order_relaxed);
    const uint32_t e = node->end.load(std::memory_order_relaxed);
    bool hit = false;
    for (uint32_t g = 0; g < node->num_groups; ++g) {
      const HolderGroup& hg = node->group(g);
      for (int t = 0; t < kNumTiers; ++t) {
        const uint64_t gone = hg.tiers[t].load(std::memory_order_relaxed) & drop[hg.group];
        for (uint64_t x = gone; x != 0; x &= x - 1) {
          SourceRecord* rec = sources_.record(hg.group * kGroupBits + std::countr_zero(x),
                                              std::memory_order_relaxed);
          digest += DigestRange(rec, static_cast<Tier>(t), node, b, e);
          CountDelta(rec, static_cast<Tier>(t), -static_cast<int64_t>(e - b));
        }
        hit |= gone != 0;
      }
    }
    if (hit) touched.push_back(node);
  }
  // Fallback readers wait for one bounded run of nodes, not for the pass.
  for (size_t i = 0; i < touched.size();) {
    uint32_t nodes = 0, erased = 0;
    seqlock_.LockRemovals();
    if (clear_observer_ != nullptr) clear_observer_->OnLockAcquired();
    while (i < touched.size() && nodes < kClearNodesPerLockHold &&
           erased < kClearBlocksPerLockHold) {
      erased += ClearNode(touched[i++], drop);
      ++nodes;
    }
    if (clear_observer_ != nullptr) clear_observer_->OnLockReleased(nodes);
    seqlock_.UnlockRemovals();
  }
  digest_.fetch_sub(digest, std::memory_order_relaxed);

  // Free the ids inside a global bracket, so no reader pairs an id it read
  // before with the record of a source that reuses it.
  std::vector<SourceRecord*> retired;
  seqlock_.Begin();
  for (uint32_t id : ids) retired.push_back(sources_.Release(id));
  seqlock_.End();
  // One grace period for the records and for the nodes retired above.
  grace_.Synchronize();
  for (SourceRecord* rec : retired) sources_.Destroy(rec);
  FreeRetired();
}

uint32_t ModelIndex::ClearNode(ChainNode* node, const uint64_t* drop) {
  const uint32_t b = node->begin.load(std::memory_order_relaxed);
  const uint32_t e = node->end.load(std::memory_order_relaxed);
  bool left = false;
  for (uint32_t g = 0; g < node->num_groups && !left; ++g) {
    const HolderGroup& hg = node->group(g);
    for (const auto& tier_bits : hg.tiers) {
      left |= (tier_bits.load(std::memory_order_relaxed) & ~drop[hg.group]) != 0;
    }
  }
  if (!left) {
    Departed(node, b, e);
    EraseRange(node, b, e);
    Shrink(node, b, b);
    return e - b;
  }
  Preserve(node);  // an open capture keeps what the node held
  node->BeginWrite();
  for (uint32_t g = 0; g < node->num_groups; ++g) {
    HolderGroup& hg = node->group(g);
    for (auto& tier_bits : hg.tiers) {
      tier_bits.store(tier_bits.load(std::memory_order_relaxed) & ~drop[hg.group],
                      std::memory_order_relaxed);
    }
  }
  node->EndWrite();
  return 0;
}

std::unique_ptr<ModelCapture> ModelIndex::BeginCapture(std::vector<SourceKey>* sources) {
  if (capture_.open()) return nullptr;
  const uint32_t ids = sources_.limit();
  sources->assign(ids, SourceKey{});
  std::vector<bool> live(ids, false);
  for (uint32_t id = 0; id < ids; ++id) {
    if (const SourceRecord* rec = sources_.record(id, std::memory_order_relaxed)) {
      (*sources)[id] = rec->key;
      live[id] = true;
    }
  }
  return std::make_unique<ModelCapture>(
      &capture_, std::vector<const ChainNode*>(nodes_.begin(), nodes_.end()), std::move(live));
}

void ModelIndex::ForEachEntry(
    const std::function<void(const SourceKey&, Tier, uint64_t)>& fn) const {
  ForEachRun([&](const SourceKey& key, Tier tier, std::span<const uint64_t> hashes) {
    for (uint64_t hash : hashes) fn(key, tier, hash);
  });
}

}  // namespace kvindex::index::internal
