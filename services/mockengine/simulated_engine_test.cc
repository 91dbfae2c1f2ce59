#include "services/mockengine/simulated_engine.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "services/mockengine/prompt_tokens.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/normalize/source_processor.h"

namespace kvindex::mockengine {
namespace {

std::vector<uint32_t> Tokens(size_t n, uint32_t start = 1) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(SimulatedEngineTest, StoresOnlyNewFullBlocksWithParent) {
  SimulatedEngine engine({.block_size = 4, .device_capacity_blocks = 100});
  std::vector<wire::WireEvent> events;
  engine.ServePrompt(Tokens(10), &events);  // 2 full blocks, tail ignored
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, wire::EventType::kBlockStored);
  EXPECT_EQ(events[0].block_hashes.size(), 2u);
  EXPECT_FALSE(events[0].parent_block_hash.has_value());
  EXPECT_EQ(events[0].token_ids, Tokens(8));
  const uint64_t second = events[0].block_hashes[1];

  events.clear();
  engine.ServePrompt(Tokens(12), &events);  // prefix reused, one new block
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].block_hashes.size(), 1u);
  EXPECT_EQ(events[0].parent_block_hash, second);
  EXPECT_EQ(events[0].token_ids, Tokens(4, 9));

  events.clear();
  engine.ServePrompt(Tokens(12), &events);  // fully cached: nothing to say
  EXPECT_TRUE(events.empty());
}

TEST(SimulatedEngineTest, EvictionOffloadsBeforeDeviceRemoval) {
  SimulatedEngine engine({.block_size = 4, .device_capacity_blocks = 2, .host_capacity_blocks = 1});
  std::vector<wire::WireEvent> events;
  engine.ServePrompt(Tokens(8), &events);
  events.clear();
  engine.ServePrompt(Tokens(8, 100), &events);  // needs both slots
  // Both device blocks are offloaded; the host holds one, so the first is
  // evicted from the host again within the same batch.
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, wire::EventType::kBlockStored);  // offload placeholders
  EXPECT_EQ(events[0].medium, "CPU");
  EXPECT_EQ(events[0].block_size, 0u);
  EXPECT_TRUE(events[0].token_ids.empty());
  EXPECT_EQ(events[0].block_hashes.size(), 2u);
  EXPECT_EQ(events[1].type, wire::EventType::kBlockRemoved);
  EXPECT_EQ(events[1].medium, "CPU");
  EXPECT_EQ(events[1].block_hashes.size(), 1u);
  EXPECT_EQ(events[2].type, wire::EventType::kBlockRemoved);
  EXPECT_EQ(events[2].medium, "GPU");
  EXPECT_EQ(events[2].block_hashes.size(), 2u);
  EXPECT_EQ(events[3].type, wire::EventType::kBlockStored);
  EXPECT_EQ(events[3].medium, "GPU");
  EXPECT_EQ(engine.device_blocks(), 2u);
  EXPECT_EQ(engine.host_blocks(), 1u);
}

TEST(SimulatedEngineTest, EngineHashesDifferAcrossWorkers) {
  SimulatedEngine a({.block_size = 4, .hash_seed = 1});
  SimulatedEngine b({.block_size = 4, .hash_seed = 2});
  std::vector<wire::WireEvent> ea, eb;
  a.ServePrompt(Tokens(4), &ea);
  b.ServePrompt(Tokens(4), &eb);
  EXPECT_NE(ea[0].block_hashes, eb[0].block_hashes);
}

// The engine's events, encoded as vLLM map batches and normalized by the real
// agent code, leave exactly the engine's cache contents as placements.
TEST(SimulatedEngineTest, NormalizedEventsTrackTheCacheExactly) {
  for (const bool array_form : {false, true}) {
    SimulatedEngine engine({.block_size = 4,
                            .device_capacity_blocks = 24,
                            .host_capacity_blocks = 16,
                            .hash_seed = 9});
    normalize::SourceOptions options;
    options.worker = "w0";
    options.model = "m";
    options.block_size = 4;
    normalize::SourceStats stats;
    normalize::SourceProcessor processor(options, &stats);
    wire::EncodeOptions encoding;
    if (array_form) encoding.form = wire::EventForm::kArray;
    std::mt19937 rng(5);
    // Placements applied as sets, and an independent engine hash -> canonical
    // map built from the engine's own stored events (semantics.md section 2).
    std::set<uint64_t> held[kNumTiers];
    absl::flat_hash_map<uint64_t, uint64_t> canonical_of;
    std::vector<uint64_t> local, seq;
    std::vector<wire::WireEvent> events;
    std::vector<uint8_t> payload;
    std::vector<PlacementEvent> placements;
    for (int r = 0; r < 300; ++r) {
      // Prompts share prefixes: a few roots, random lengths.
      std::vector<uint32_t> tokens = Tokens(4 * (1 + rng() % 12), 1000 * (rng() % 4));
      events.clear();
      engine.ServePrompt(tokens, &events);
      if (events.empty()) continue;
      for (const wire::WireEvent& e : events) {
        if (e.type != wire::EventType::kBlockStored || e.token_ids.empty()) continue;
        hashing::ComputeLocalHashes(e.token_ids, 4, hashing::LocalHashSeed("", ""), &local);
        std::optional<uint64_t> parent;
        if (e.parent_block_hash) parent = canonical_of.at(*e.parent_block_hash);
        hashing::ComputeSequenceHashes(local, parent, &seq);
        for (size_t i = 0; i < e.block_hashes.size(); ++i) canonical_of[e.block_hashes[i]] = seq[i];
      }
      payload.clear();
      wire::EncodeBatch(1.0, events, 0u, encoding, &payload);
      placements.clear();
      ASSERT_TRUE(processor.ProcessPayload(payload, &placements).ok());
      for (const PlacementEvent& p : placements) {
        const int t = static_cast<int>(p.tier);
        for (uint64_t h : p.block_hashes) {
          if (p.kind == PlacementKind::kStored) {
            EXPECT_TRUE(held[t].insert(h).second) << h;
          } else if (p.kind == PlacementKind::kRemoved) {
            EXPECT_EQ(held[t].erase(h), 1u) << h;
          }
        }
      }
      // After every prompt, each tier's placements are exactly the engine's blocks.
      std::set<uint64_t> device, host;
      for (uint64_t h : engine.device_hashes()) device.insert(canonical_of.at(h));
      for (uint64_t h : engine.host_hashes()) host.insert(canonical_of.at(h));
      ASSERT_EQ(held[static_cast<int>(Tier::kDevice)], device) << "prompt " << r;
      ASSERT_EQ(held[static_cast<int>(Tier::kHost)], host) << "prompt " << r;
    }
    EXPECT_GT(engine.host_blocks(), 0u);  // offload happened, so the host tier was exercised
    EXPECT_EQ(stats.dropped[static_cast<int>(DropReason::kUnresolvedPlaceholder)].load(), 0u);
    EXPECT_EQ(stats.dropped[static_cast<int>(DropReason::kParentNotFound)].load(), 0u);
  }
}

TEST(PromptTokensTest, EqualIdsGiveEqualTokensAndInputLengthCuts) {
  trace::TraceRequest a{.input_length = 0, .hash_ids = {0, 1}};
  trace::TraceRequest b{.input_length = 700, .hash_ids = {0, 2}};
  const auto ta = PromptTokens(a);
  const auto tb = PromptTokens(b);
  ASSERT_EQ(ta.size(), 1024u);
  ASSERT_EQ(tb.size(), 700u);
  EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 512, tb.begin()));
  EXPECT_FALSE(std::equal(ta.begin() + 512, ta.begin() + 700, tb.begin() + 512));
}

}  // namespace
}  // namespace kvindex::mockengine
