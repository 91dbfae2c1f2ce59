// Ground truth of the simulated cluster: which blocks each source (worker,
// dp rank) holds in which tier, in canonical hashes (semantics.md section 2),
// its state digest (section 6, through the index's own EntriesDigest) and
// the section 5 match answer computed from it.
//
//   std::vector<TruthSource> sources = ...;   // views into the engines
//   std::string json;
//   WriteTruthJson(sources, done, total, &json);        // GET /v1/truth
//   index::MatchResult m = MatchTruth(sources, "m", seq_hashes, false);
//
// Thread safety: reads the engines; the caller excludes their writer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "services/mockengine/agent_view.h"
#include "services/mockengine/simulated_engine.h"
#include "shared/index/index_types.h"
#include "shared/model/source_key.h"

namespace kvindex::mockengine {

struct TruthSource {
  std::string model;
  SourceKey key;
  uint32_t block_size = 0;
  const SimulatedEngine* engine = nullptr;
  // What the index may hold (the agent's view of the delivered events).
  const AgentView* view = nullptr;
  // A fault made the index clear this source (decode error, unrecoverable
  // gap, restart); not set by a recoverable drop.
  bool cleared_by_fault = false;
};

// Sorted canonical hashes `source` holds on `tier` (device, host or disk);
// with `index_view`, only those the index may hold.
std::vector<uint64_t> TierCanonical(const TruthSource& source, Tier tier, bool index_view);

// semantics.md section 6 over every truth entry (the engines' tiers); with
// `index_view`, over what the index may hold (stored_since_clear): equal to
// the router's digest after a run with faults.
uint64_t TruthDigest(std::span<const TruthSource> sources, bool index_view = false);

// "0123456789abcdef": 16 lower-case hex digits.
std::string DigestHex(uint64_t digest);

// The GET /v1/truth body (plus "stored_since_clear_digest").
void WriteTruthJson(std::span<const TruthSource> sources, uint64_t requests_done,
                    uint64_t requests_total, std::string* out);

// semantics.md section 5 over the truth: per source of `model`, the longest
// prefix of `seq_hashes` held in some tier, each block in its fastest tier.
// `index_view`: match what the index may hold instead of the engines' tiers.
index::MatchResult MatchTruth(std::span<const TruthSource> sources, std::string_view model,
                              std::span<const uint64_t> seq_hashes, bool index_view);

}  // namespace kvindex::mockengine
