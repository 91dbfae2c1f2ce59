#include "shared/normalize/source_processor.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/normalize/internal/rank_state.h"

namespace kvindex::normalize {

using internal::EngineEntry;
using internal::RankState;
using internal::TierCounts;
using wire::EngineEvent;
using wire::EventType;
using wire::TokenLayout;

Status SourceOptions::Validate() const {
  if (block_size == 0) return absl::InvalidArgumentError("block_size must be > 0");
  return Status();
}

SourceProcessor::SourceProcessor(SourceOptions options, SourceStats* stats)
    : options_(std::move(options)), stats_(stats) {
  if (stats_ == nullptr) {
    owned_stats_ = std::make_unique<SourceStats>();
    stats_ = owned_stats_.get();
  }
  Rank(options_.dp_rank);  // the configured rank always has state (start-up clear)
}

SourceProcessor::~SourceProcessor() = default;

RankState& SourceProcessor::Rank(uint32_t dp_rank) {
  // Few ranks per socket (usually one): a sorted vector beats a map.
  auto it = std::lower_bound(
      ranks_.begin(), ranks_.end(), dp_rank,
      [](const std::unique_ptr<RankState>& state, uint32_t rank) { return state->dp_rank < rank; });
  if (it != ranks_.end() && (*it)->dp_rank == dp_rank) return **it;
  auto state = std::make_unique<RankState>();
  state->dp_rank = dp_rank;
  if (options_.expected_blocks > 0) {
    state->engine.reserve(options_.expected_blocks);
    state->canonical.reserve(options_.expected_blocks);
  }
  return **ranks_.insert(it, std::move(state));
}

size_t SourceProcessor::tracked_blocks() const {
  size_t total = 0;
  for (const auto& rank : ranks_) total += rank->engine.size();
  return total;
}

void SourceProcessor::ClearAll(std::vector<PlacementEvent>* out) {
  Rank(HomeRank());
  for (const auto& rank : ranks_) Cleared(*rank, out);
}

Status SourceProcessor::ProcessPayload(std::span<const uint8_t> payload,
                                       std::vector<PlacementEvent>* out) {
  Status status = decoder_.Decode(payload, &batch_);
  if (!status.ok()) {
    Add(stats_->batches);
    // The source's state is no longer known (semantics.md section 3): fail
    // closed, publish "cleared" for every rank, apply nothing of the payload.
    Add(stats_->decode_errors);
    Drop(DropReason::kDecodeError, 1);
    ClearAll(out);
    return status;
  }
  ProcessDecoded(batch_, out);
  return Status();
}

void SourceProcessor::ProcessDecoded(const wire::EngineBatch& batch,
                                     std::vector<PlacementEvent>* out) {
  Add(stats_->batches);
  if (batch.events.empty()) Add(stats_->empty_batches);
  if (batch.unknown_keys > 0) Add(stats_->unknown_keys, batch.unknown_keys);
  const uint32_t dp_rank = batch.dp_rank.value_or(options_.dp_rank);
  if (options_.dp_rank_limit != 0 && dp_rank >= options_.dp_rank_limit) {
    Drop(DropReason::kRankOutOfRange, std::max<uint64_t>(1, batch.events.size()));
    return;
  }
  if (options_.pin_first_rank && !PinRank(dp_rank, out)) {
    Drop(DropReason::kRankOutOfRange, std::max<uint64_t>(1, batch.events.size()));
    return;
  }
  RankState& rank = Rank(dp_rank);
  if (observer_ != nullptr) observer_->OnBatch(batch, dp_rank);

  for (const EngineEvent& event : batch.events) {
    const size_t first_placement = out->size();
    if (observer_ != nullptr) {
      outcome_ = EventOutcome{};
      outcome_.dp_rank = dp_rank;
      block_outcomes_.assign(event.block_hashes.size(), BlockOutcome{});
    }
    Add(stats_->events_received[static_cast<int>(event.type)]);
    switch (event.type) {
      case EventType::kBlockStored:
        Stored(rank, event, out);
        break;
      case EventType::kBlockRemoved:
        Removed(rank, event, out);
        break;
      case EventType::kAllBlocksCleared:
        Cleared(rank, out);
        break;
      case EventType::kUnknown:
        Drop(DropReason::kUnknownEvent, 1);
        break;
    }
    if (observer_ != nullptr) {
      outcome_.blocks = block_outcomes_;
      outcome_.placements = {out->data() + first_placement, out->size() - first_placement};
      observer_->OnEvent(event, outcome_);
    }
  }
}

bool SourceProcessor::PinRank(uint32_t dp_rank, std::vector<PlacementEvent>* out) {
  if (pinned_rank_) return *pinned_rank_ == dp_rank;
  pinned_rank_ = dp_rank;
  if (dp_rank == options_.dp_rank) return true;
  // The default rank is another socket's: drop its (empty) state so no clear
  // of this socket names it, and clear the served rank once, as the start-up
  // clear would have (a previous process may have left blocks under it).
  auto it = std::find_if(ranks_.begin(), ranks_.end(), [&](const auto& state) {
    return state->dp_rank == options_.dp_rank && state->engine.empty();
  });
  if (it != ranks_.end()) ranks_.erase(it);
  Cleared(Rank(dp_rank), out);
  return true;
}

void SourceProcessor::Drop(DropReason reason, uint64_t count) {
  Add(stats_->dropped[static_cast<int>(reason)], count);
  if (observer_ != nullptr) {
    outcome_.drop = reason;
    if (DropReasonCountsBlocks(reason)) outcome_.dropped_blocks = static_cast<uint32_t>(count);
  }
}

PlacementEvent& SourceProcessor::NewPlacement(PlacementKind kind, uint32_t dp_rank,
                                              std::vector<PlacementEvent>* out) {
  PlacementEvent& placement = out->emplace_back();
  placement.kind = kind;
  placement.model = options_.model;
  placement.source.worker = options_.worker;
  placement.source.dp_rank = dp_rank;
  return placement;
}

void SourceProcessor::Snapshot(std::vector<PlacementEvent>* out, size_t max_hashes) const {
  if (max_hashes == 0) max_hashes = 1;
  for (const auto& rank : ranks_) {
    auto new_event = [&](PlacementKind kind) -> PlacementEvent& {
      PlacementEvent& e = out->emplace_back();
      e.kind = kind;
      e.model = options_.model;
      e.source.worker = options_.worker;
      e.source.dp_rank = rank->dp_rank;
      return e;
    };
    new_event(PlacementKind::kCleared);
    // Parent of each canonical block, where an engine entry knows it.
    absl::flat_hash_map<uint64_t, uint64_t> parent_of;
    // SGLang: the engine hash of each canonical block (the smallest when
    // several share one), published beside it as its stores did.
    const bool sglang = options_.engine == wire::EngineKind::kSglang;
    absl::flat_hash_map<uint64_t, uint64_t> engine_of;
    for (const auto& [engine_hash, entry] : rank->engine) {
      if (entry.has_parent) parent_of.emplace(entry.canonical, entry.parent);
      if (sglang) {
        auto [it, inserted] = engine_of.try_emplace(entry.canonical, engine_hash);
        if (!inserted) it->second = std::min(it->second, engine_hash);
      }
    }
    for (int t = 0; t < kNumTiers; ++t) {
      // Blocks held in tier t, each emitted after its parent when the parent
      // is held too, so routers get chains (fewer index nodes) back.
      absl::flat_hash_map<uint64_t, std::vector<uint64_t>> children;
      std::vector<uint64_t> roots;
      for (const auto& [canonical, counts] : rank->canonical) {
        if (counts[t] == 0) continue;
        auto parent = parent_of.find(canonical);
        const bool chained = parent != parent_of.end() && parent->second != canonical &&
                             rank->canonical.contains(parent->second) &&
                             rank->canonical.at(parent->second)[t] > 0;
        if (chained) {
          children[parent->second].push_back(canonical);
        } else {
          roots.push_back(canonical);
        }
      }
      std::sort(roots.begin(), roots.end());  // deterministic output
      PlacementEvent* current = nullptr;
      std::vector<uint64_t> stack;
      for (uint64_t root : roots) {
        stack.push_back(root);
        while (!stack.empty()) {
          const uint64_t block = stack.back();
          stack.pop_back();
          if (current == nullptr || current->block_hashes.size() >= max_hashes) {
            current = &new_event(PlacementKind::kStored);
            current->tier = static_cast<Tier>(t);
            current->block_size = options_.block_size;
          }
          current->block_hashes.push_back(block);
          if (sglang) current->sglang_hashes.push_back(engine_of.at(block));
          auto kids = children.find(block);
          if (kids != children.end()) {
            std::sort(kids->second.begin(), kids->second.end(), std::greater<>());
            stack.insert(stack.end(), kids->second.begin(), kids->second.end());
          }
        }
      }
    }
  }
}

void SourceProcessor::Cleared(RankState& rank, std::vector<PlacementEvent>* out) {
  rank.Clear();
  NewPlacement(PlacementKind::kCleared, rank.dp_rank, out);
  Add(stats_->clears);
}

void SourceProcessor::Stored(RankState& rank, const EngineEvent& event,
                             std::vector<PlacementEvent>* out) {
  const std::span<const uint64_t> hashes = event.block_hashes;
  Add(stats_->blocks_received[kBlocksStored], hashes.size());

  // Checks in the order of semantics.md section 3 "Precise rules": group
  // filter, medium, locality, placeholder resolution, block_size, token
  // count, parent. The first failing one names the reason.
  DropReason reason = CheckGroup(options_.group, event.group_idx, event.kv_cache_spec_kind);
  if (reason != DropReason::kNone) {
    Drop(reason, 1);
    if (observer_ != nullptr) InformationalHashes(rank, event);
    return;
  }
  const TierOrDrop tier = TierFromMedium(event.medium);
  if (tier.drop != DropReason::kNone) {
    Drop(tier.drop, 1);
    if (observer_ != nullptr) InformationalHashes(rank, event);
    return;
  }
  if (observer_ != nullptr) outcome_.tier = tier.tier;
  reason = CheckLocality(event.locality);
  if (reason != DropReason::kNone) {
    Drop(reason, 1);
    if (observer_ != nullptr) InformationalHashes(rank, event);
    return;
  }

  new_blocks_.clear();
  if (event.block_size == 0 || event.token_ids.empty()) {
    // Placeholder (e.g. CPU offload without self-describing events): the
    // block was announced with tokens on another tier; resolve each engine
    // hash through the map. Unresolved blocks are dropped (never invented).
    if (observer_ != nullptr) outcome_.placeholder = true;
    uint64_t unresolved = 0;
    for (uint64_t hash : hashes) rank.engine.prefetch(hash);
    for (uint32_t i = 0; i < hashes.size(); ++i) {
      auto it = rank.engine.find(hashes[i]);
      if (it == rank.engine.end()) {
        ++unresolved;
        continue;
      }
      Increment(rank, it->second, tier.tier, i);
    }
    Add(stats_->placeholder_blocks_resolved, hashes.size() - unresolved);
    if (unresolved > 0) Drop(DropReason::kUnresolvedPlaceholder, unresolved);
    EmitStoredRuns(rank, tier.tier, SglangHashes(hashes), out);
    return;
  }

  if (event.block_size != options_.block_size) {
    // Loud on purpose: a silent mismatch breaks routing for every request.
    Drop(DropReason::kBlockSizeMismatch, 1);
    if (observer_ != nullptr) InformationalHashes(rank, event);
    return;
  }
  const size_t tokens = event.token_ids.size();
  const size_t complete = event.token_layout == TokenLayout::kBigram
                              ? (tokens - 1) / event.block_size
                              : tokens / event.block_size;
  if (complete != hashes.size()) {
    Drop(DropReason::kTokenCountMismatch, 1);
    if (observer_ != nullptr) InformationalHashes(rank, event);
    return;
  }
  std::optional<uint64_t> parent;
  if (event.parent_block_hash.has_value()) {
    auto it = rank.engine.find(*event.parent_block_hash);
    if (it == rank.engine.end()) {
      Drop(DropReason::kParentNotFound, 1);
      return;
    }
    parent = it->second.canonical;
  }

  if (options_.max_blocks_per_tier != 0 &&
      rank.held[static_cast<int>(tier.tier)] >= options_.max_blocks_per_tier) {
    Drop(DropReason::kBlockCap, hashes.size());
    return;
  }
  ComputeLocalHashes(event);
  // Hash first, then touch the maps: the prefetches of both maps' slots for
  // the whole event are in flight together instead of one miss per access.
  sequence_.resize(hashes.size());
  for (uint32_t i = 0; i < hashes.size(); ++i) {
    sequence_[i] = i == 0 && !parent.has_value() ? local_[0]
                   : i == 0                      ? hashing::ChainHash(*parent, local_[0])
                                                 : hashing::ChainHash(sequence_[i - 1], local_[i]);
  }
  for (uint32_t i = 0; i < hashes.size(); ++i) {
    rank.engine.prefetch(hashes[i]);
    rank.canonical.prefetch(sequence_[i]);
  }
  for (uint32_t i = 0; i < hashes.size(); ++i) {
    auto [it, inserted] = rank.engine.try_emplace(hashes[i]);
    EngineEntry& entry = it->second;
    if (inserted) {
      entry.canonical = sequence_[i];
      entry.has_parent = i > 0 || parent.has_value();
      entry.parent = i > 0 ? sequence_[i - 1] : parent.value_or(0);
    }
    // An engine hash already mapped keeps its first canonical hash, so that
    // its removal undoes exactly what its stores did.
    Increment(rank, entry, tier.tier, i);
  }
  EmitStoredRuns(rank, tier.tier, SglangHashes(hashes), out);
}

void SourceProcessor::Increment(RankState& rank, EngineEntry& entry, Tier tier, uint32_t index) {
  const int t = static_cast<int>(tier);
  // Re-announcing sources: a device copy already held is refreshed, not added.
  const bool saturate = options_.report_full && tier == Tier::kDevice;
  if (!saturate || entry.counts[t] == 0) ++entry.counts[t];
  uint32_t& count = rank.canonical[entry.canonical][t];
  const bool published = (saturate && count != 0) ? false : ++count == 1;
  if (published) {
    ++rank.held[t];
    new_blocks_.push_back({index, entry.canonical, entry.parent, entry.has_parent});
  }
  if (observer_ != nullptr) block_outcomes_[index] = {entry.canonical, published};
}

std::span<const uint64_t> SourceProcessor::SglangHashes(std::span<const uint64_t> hashes) const {
  if (options_.engine != wire::EngineKind::kSglang) return {};
  return hashes;
}

void SourceProcessor::EmitStoredRuns(const RankState& rank, Tier tier,
                                     std::span<const uint64_t> engine_hashes,
                                     std::vector<PlacementEvent>* out) {
  if (new_blocks_.empty()) return;
  PlacementEvent* current = nullptr;
  size_t current_index = 0;
  const NewBlock* previous = nullptr;
  for (size_t k = 0; k < new_blocks_.size(); ++k) {
    const NewBlock& block = new_blocks_[k];
    const bool continues = previous != nullptr && block.index == previous->index + 1 &&
                           block.has_parent && block.parent == previous->canonical;
    if (!continues) {
      current_index = out->size();
      current = &NewPlacement(PlacementKind::kStored, rank.dp_rank, out);
      current->block_hashes.reserve(new_blocks_.size() - k);  // one allocation per placement
      if (!engine_hashes.empty()) current->sglang_hashes.reserve(new_blocks_.size() - k);
      current->tier = tier;
      current->block_size = options_.block_size;
      if (block.has_parent) current->parent_hash = block.parent;
      Add(stats_->placements_stored);
    }
    current = &(*out)[current_index];
    current->block_hashes.push_back(block.canonical);
    if (!engine_hashes.empty()) current->sglang_hashes.push_back(engine_hashes[block.index]);
    previous = &block;
  }
  Add(stats_->blocks_published_stored, new_blocks_.size());
}

void SourceProcessor::Removed(RankState& rank, const EngineEvent& event,
                              std::vector<PlacementEvent>* out) {
  const std::span<const uint64_t> hashes = event.block_hashes;
  Add(stats_->blocks_received[kBlocksRemoved], hashes.size());
  // BlockRemoved carries group_idx but no spec kind; same check order.
  DropReason reason = CheckGroup(options_.group, event.group_idx, std::nullopt);
  if (reason != DropReason::kNone) return Drop(reason, 1);
  const TierOrDrop tier = TierFromMedium(event.medium);
  if (tier.drop != DropReason::kNone) return Drop(tier.drop, 1);
  if (observer_ != nullptr) outcome_.tier = tier.tier;
  reason = CheckLocality(event.locality);
  if (reason != DropReason::kNone) return Drop(reason, 1);

  // Three passes so that the hash-map misses of the whole event overlap:
  // prefetch the engine slots; look them up and decrement (prefetching the
  // canonical slots); then settle the canonical counts in event order.
  const int t = static_cast<int>(tier.tier);
  for (uint64_t hash : hashes) rank.engine.prefetch(hash);
  removals_.clear();
  uint64_t not_found = 0;
  for (uint32_t i = 0; i < hashes.size(); ++i) {
    auto it = rank.engine.find(hashes[i]);
    if (it == rank.engine.end() || it->second.counts[t] == 0) {
      ++not_found;  // count 0 in this tier: ignored (vLLM removes once per copy)
      continue;
    }
    --it->second.counts[t];
    removals_.push_back({i, it->second.canonical});
    rank.canonical.prefetch(it->second.canonical);
  }
  size_t placement_index = SIZE_MAX;
  for (const Removal& removal : removals_) {
    bool gone = false;
    auto cit = rank.canonical.find(removal.canonical);
    if (cit != rank.canonical.end() && cit->second[t] > 0) {
      gone = --cit->second[t] == 0;
      if (gone) --rank.held[t];
      if (internal::AllZero(cit->second)) rank.canonical.erase(cit);
    }
    // Looked up again (cache-hot): an engine hash listed twice in one event
    // must not be erased twice.
    auto it = rank.engine.find(hashes[removal.index]);
    if (it != rank.engine.end() && internal::AllZero(it->second.counts)) rank.engine.erase(it);
    if (observer_ != nullptr) block_outcomes_[removal.index] = {removal.canonical, gone};
    if (!gone) continue;
    if (placement_index == SIZE_MAX) {
      placement_index = out->size();
      PlacementEvent& placement = NewPlacement(PlacementKind::kRemoved, rank.dp_rank, out);
      placement.tier = tier.tier;
      placement.block_hashes.reserve(removals_.size());
      Add(stats_->placements_removed);
    }
    (*out)[placement_index].block_hashes.push_back(removal.canonical);
  }
  if (placement_index != SIZE_MAX) {
    Add(stats_->blocks_published_removed, (*out)[placement_index].block_hashes.size());
  }
  if (not_found > 0) Drop(DropReason::kBlockNotFound, not_found);
}

void SourceProcessor::ComputeLocalHashes(const EngineEvent& event) {
  const uint64_t seed =
      hashing::LocalHashSeed(event.lora_name.value_or(""), event.cache_salt.value_or(""));
  if (event.token_layout == TokenLayout::kBigram) {
    hashing::ComputeEagleLocalHashes(event.token_ids, event.block_size, seed, &local_);
  } else {
    hashing::ComputeLocalHashes(event.token_ids, event.block_size, seed, &local_);
  }
}

void SourceProcessor::InformationalHashes(const RankState& rank, const EngineEvent& event) {
  // Only for the observer (kvindex-ctl decode): what the tokens hash to,
  // although the event was dropped. Needs tokens, a block size, and a parent
  // that is nil or known.
  if (event.token_ids.empty() || event.block_size == 0) return;
  std::optional<uint64_t> parent;
  if (event.parent_block_hash.has_value()) {
    auto it = rank.engine.find(*event.parent_block_hash);
    if (it == rank.engine.end()) return;
    parent = it->second.canonical;
  }
  ComputeLocalHashes(event);
  const size_t n = std::min(local_.size(), block_outcomes_.size());
  for (size_t i = 0; i < n; ++i) {
    const uint64_t canonical =
        parent.has_value() ? hashing::ChainHash(*parent, local_[i]) : local_[i];
    block_outcomes_[i].canonical = canonical;
    parent = canonical;
  }
  outcome_.informational = n > 0;
}

}  // namespace kvindex::normalize
