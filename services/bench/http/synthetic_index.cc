#include "services/bench/http/synthetic_index.h"

#include <algorithm>
#include <optional>
#include <random>

#include "shared/hashing/canonical_hash.h"

namespace kvindex::bench {

std::vector<std::vector<uint32_t>> BuildSyntheticIndex(const SyntheticIndexOptions& o,
                                                       index::KvIndex* index) {
  std::mt19937_64 rng(o.seed);
  const size_t prompt_tokens = size_t{o.prompt_blocks} * o.block_size;
  std::vector<std::vector<uint32_t>> recent;  // prompts to share prefixes with
  std::vector<std::vector<uint32_t>> sample;
  std::vector<uint64_t> local, seq;
  uint64_t position = 1, prompts = 0, entries = 0;
  std::vector<uint32_t> workers(o.workers);
  for (uint32_t w = 0; w < o.workers; ++w) workers[w] = w;
  auto actual_entries = [&] {
    uint64_t total = 0;
    for (uint64_t e : index->Stats().entries) total += e;
    return total;
  };
  while (true) {
    // The running count overestimates (shared prefixes); confirm with Stats.
    if (entries >= o.entries && (entries = actual_entries()) >= o.entries) break;
    std::vector<uint32_t> tokens(prompt_tokens);
    size_t shared = 0;
    // Half the prompts share a "system prompt" with a recent one.
    if (!recent.empty() && (rng() & 1)) {
      const auto& base = recent[rng() % recent.size()];
      shared = size_t{1 + rng() % o.max_shared_blocks} * o.block_size;
      std::copy(base.begin(), base.begin() + static_cast<long>(shared), tokens.begin());
    }
    for (size_t i = shared; i < tokens.size(); ++i)
      tokens[i] = static_cast<uint32_t>(rng() % 128000);
    hashing::ComputeLocalHashes(tokens, o.block_size, hashing::LocalHashSeed("", ""), &local);
    hashing::ComputeSequenceHashes(local, std::nullopt, &seq);

    std::shuffle(workers.begin(), workers.end(), rng);
    for (uint32_t r = 0; r < std::min(o.replicas, o.workers); ++r) {
      PlacementEvent event;
      event.kind = PlacementKind::kStored;
      event.model = o.model;
      event.source = {SyntheticWorkerName(workers[r]), 0};
      event.agent = "bench";
      event.tier = (rng() % 5 == 0) ? Tier::kHost : Tier::kDevice;
      event.block_size = o.block_size;
      const size_t length =
          o.prompt_blocks / 4 + rng() % (o.prompt_blocks - o.prompt_blocks / 4 + 1);
      event.block_hashes.assign(seq.begin(), seq.begin() + static_cast<long>(length));
      index->Apply(event, position++);
      entries += length;
    }
    if (recent.size() < 64) {
      recent.push_back(tokens);
    } else {
      recent[rng() % recent.size()] = tokens;
    }
    // Reservoir sample of query prompts.
    ++prompts;
    if (sample.size() < o.queries) {
      sample.push_back(std::move(tokens));
    } else if (rng() % prompts < o.queries) {
      sample[rng() % sample.size()] = std::move(tokens);
    }
    if ((prompts & 1023) == 0) entries = actual_entries();
  }
  return sample;
}

}  // namespace kvindex::bench
