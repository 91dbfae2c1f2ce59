#include "services/mockengine/ground_truth.h"

#include <algorithm>
#include <cstdio>

#include "shared/index/index_interface.h"
#include "shared/query/json_writer.h"

namespace kvindex::mockengine {
namespace {

constexpr Tier kTruthTiers[] = {Tier::kDevice, Tier::kHost, Tier::kDisk};

bool Holds(const TruthSource& source, Tier tier, uint64_t engine_hash, bool index_view) {
  if (index_view) return source.view->Holds(tier, engine_hash);
  return source.engine->Holds(tier, engine_hash);
}

void WriteHashes(query::JsonWriter& w, std::string_view key, const std::vector<uint64_t>& hashes) {
  w.Key(key);
  w.BeginArray();
  for (uint64_t h : hashes) w.UInt(h);
  w.EndArray();
}

}  // namespace

std::vector<uint64_t> TierCanonical(const TruthSource& source, Tier tier, bool index_view) {
  std::vector<uint64_t> out;
  for (uint64_t engine_hash : source.engine->EngineHashes(tier)) {
    // The view is a subset of the engine: it only ever saw the engine's events.
    if (index_view && !source.view->Holds(tier, engine_hash)) continue;
    if (auto canonical = source.engine->CanonicalOf(engine_hash)) out.push_back(*canonical);
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t TruthDigest(std::span<const TruthSource> sources, bool index_view) {
  uint64_t digest = 0;
  for (const TruthSource& source : sources) {
    for (Tier tier : kTruthTiers) {
      digest +=
          index::EntriesDigest(source.model, source.key, tier,
                               TierCanonical(source, tier, index_view && source.cleared_by_fault));
    }
  }
  return digest;
}

std::string DigestHex(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

void WriteTruthJson(std::span<const TruthSource> sources, uint64_t requests_done,
                    uint64_t requests_total, std::string* out) {
  query::JsonWriter w(out);
  w.BeginObject();
  w.Field("requests_done", requests_done);
  w.Field("requests_total", requests_total);
  w.Field("digest", DigestHex(TruthDigest(sources)));
  w.Field("stored_since_clear_digest", DigestHex(TruthDigest(sources, /*index_view=*/true)));
  w.Key("sources");
  w.BeginArray();
  for (const TruthSource& source : sources) {
    std::vector<uint64_t> tiers[3], since[3];
    for (int t = 0; t < 3; ++t) {
      tiers[t] = TierCanonical(source, kTruthTiers[t], false);
      since[t] = source.cleared_by_fault ? TierCanonical(source, kTruthTiers[t], true) : tiers[t];
    }
    w.BeginObject();
    w.Field("model", source.model);
    w.Field("worker", source.key.worker);
    w.Field("dp_rank", source.key.dp_rank);
    w.Field("block_size", source.block_size);
    w.Key("entries");
    w.BeginObject();
    for (int t = 0; t < 3; ++t) w.Field(TierName(kTruthTiers[t]), tiers[t].size());
    w.EndObject();
    for (int t = 0; t < 3; ++t) WriteHashes(w, TierName(kTruthTiers[t]), tiers[t]);
    w.Key("cleared_by_fault");
    w.Bool(source.cleared_by_fault);
    w.Key("stored_since_clear");
    w.BeginObject();
    for (int t = 0; t < 3; ++t) WriteHashes(w, TierName(kTruthTiers[t]), since[t]);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

index::MatchResult MatchTruth(std::span<const TruthSource> sources, std::string_view model,
                              std::span<const uint64_t> seq_hashes, bool index_view) {
  index::MatchResult result;
  result.blocks = static_cast<uint32_t>(seq_hashes.size());
  for (const TruthSource& source : sources) {
    if (source.model != model) continue;
    index::WorkerMatch m;
    m.source = source.key;
    bool device_run = true;
    for (uint64_t seq : seq_hashes) {
      const uint64_t engine_hash = source.engine->EngineHash(seq);
      uint32_t* counter = nullptr;
      if (Holds(source, Tier::kDevice, engine_hash, index_view)) {
        counter = &m.device;
      } else if (Holds(source, Tier::kHost, engine_hash, index_view)) {
        counter = &m.host;
      } else if (Holds(source, Tier::kDisk, engine_hash, index_view)) {
        counter = &m.disk;
      } else {
        break;
      }
      ++*counter;
      ++m.longest;
      device_run = device_run && counter == &m.device;
      if (device_run) ++m.device_prefix;
    }
    if (m.longest > 0) result.workers.push_back(std::move(m));
  }
  index::SortWorkerMatches(&result.workers);
  return result;
}

}  // namespace kvindex::mockengine
