// SourceProcessor's saved state: version byte, then per rank its dp_rank and
// every engine entry (engine hash, canonical hash, parent, a flag and the
// four tier counts). The canonical counts and the blocks held per tier are
// rebuilt from the entries, so a saved state cannot disagree with itself.
#include <algorithm>

#include "shared/base/bytes.h"
#include "shared/normalize/internal/rank_state.h"
#include "shared/normalize/source_processor.h"

namespace kvindex::normalize {

using internal::EngineEntry;
using internal::RankState;

namespace {
constexpr uint8_t kStateVersion = 1;
}  // namespace

void SourceProcessor::SaveState(std::string* out) const {
  out->push_back(static_cast<char>(kStateVersion));
  bytes::PutVarint(out, ranks_.size());
  for (const auto& rank : ranks_) {
    bytes::PutVarint(out, rank->dp_rank);
    bytes::PutVarint(out, rank->engine.size());
    for (const auto& [engine_hash, entry] : rank->engine) {
      bytes::PutFixed64(out, engine_hash);
      bytes::PutFixed64(out, entry.canonical);
      bytes::PutFixed64(out, entry.parent);
      out->push_back(entry.has_parent ? 1 : 0);
      for (uint32_t count : entry.counts) bytes::PutVarint(out, count);
    }
  }
}

Status SourceProcessor::RestoreState(std::string_view state) {
  ranks_.clear();
  pinned_rank_.reset();
  bytes::Reader in(state, "saved source state");
  auto fail = [&](Status status) {
    ranks_.clear();
    return status;
  };
  uint8_t version = 0;
  if (Status s = in.Byte(&version, "version"); !s.ok()) return fail(s);
  if (version != kStateVersion) {
    return fail(
        absl::DataLossError("saved source state: unknown version " + std::to_string(version)));
  }
  uint64_t ranks = 0;
  if (Status s = in.Count(&ranks, 2, "ranks"); !s.ok()) return fail(s);
  for (uint64_t r = 0; r < ranks; ++r) {
    uint32_t dp_rank = 0;
    uint64_t entries = 0;
    if (Status s = in.Varint32(&dp_rank, "dp_rank"); !s.ok()) return fail(s);
    if (!ranks_.empty() && ranks_.back()->dp_rank >= dp_rank) {
      return fail(absl::DataLossError("saved source state: ranks out of order"));
    }
    if (Status s = in.Count(&entries, 29, "entries"); !s.ok()) return fail(s);
    auto rank = std::make_unique<RankState>();
    rank->dp_rank = dp_rank;
    rank->engine.reserve(std::max<uint64_t>(entries, options_.expected_blocks));
    rank->canonical.reserve(std::max<uint64_t>(entries, options_.expected_blocks));
    for (uint64_t e = 0; e < entries; ++e) {
      uint64_t engine_hash = 0;
      EngineEntry entry;
      uint8_t has_parent = 0;
      if (Status s = in.Fixed64(&engine_hash, "engine hash"); !s.ok()) return fail(s);
      if (Status s = in.Fixed64(&entry.canonical, "canonical hash"); !s.ok()) return fail(s);
      if (Status s = in.Fixed64(&entry.parent, "parent"); !s.ok()) return fail(s);
      if (Status s = in.Byte(&has_parent, "parent flag"); !s.ok()) return fail(s);
      entry.has_parent = has_parent != 0;
      for (uint32_t& count : entry.counts) {
        if (Status s = in.Varint32(&count, "count"); !s.ok()) return fail(s);
      }
      if (internal::AllZero(entry.counts) || !rank->engine.emplace(engine_hash, entry).second) {
        return fail(absl::DataLossError("saved source state: empty or repeated engine entry"));
      }
      internal::TierCounts& counts = rank->canonical[entry.canonical];
      for (int t = 0; t < kNumTiers; ++t) counts[t] += entry.counts[t];
    }
    for (const auto& [canonical, counts] : rank->canonical) {
      for (int t = 0; t < kNumTiers; ++t) rank->held[t] += counts[t] > 0 ? 1 : 0;
    }
    ranks_.push_back(std::move(rank));
  }
  if (!in.done()) return fail(absl::DataLossError("saved source state: trailing bytes"));
  if (options_.pin_first_rank) {
    // The rank served before the restart: the one holding blocks, or the only
    // one saved when it is not the default.
    for (const auto& rank : ranks_) {
      if (!rank->engine.empty()) pinned_rank_ = rank->dp_rank;
    }
    if (!pinned_rank_ && ranks_.size() == 1 && ranks_[0]->dp_rank != options_.dp_rank) {
      pinned_rank_ = ranks_[0]->dp_rank;
    }
  }
  return absl::OkStatus();
}

std::vector<std::pair<uint64_t, uint64_t>> SourceProcessor::HeldCounts() const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& rank : ranks_) {
    for (int t = 0; t < kNumTiers; ++t) {
      if (rank->held[t] > 0) {
        out.emplace_back(uint64_t{rank->dp_rank} << 2 | static_cast<uint64_t>(t), rank->held[t]);
      }
    }
  }
  return out;
}

}  // namespace kvindex::normalize
