#include "services/mockengine/simulated_engine.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "services/mockengine/prompt_tokens.h"
#include "services/mockengine/test_tokens.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/normalize/source_processor.h"

namespace kvindex::mockengine {
namespace {

using testing::Tokens;

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
  const uint64_t head = events[0].block_hashes[0];
  events.clear();
  engine.ServePrompt(Tokens(8, 100), &events);  // needs both slots
  // Both device blocks leave; the tail goes first (vLLM frees tail first),
  // so the host, holding one, keeps the head. Only net changes are
  // announced, stores before removals.
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, wire::EventType::kBlockStored);  // offload placeholder
  EXPECT_EQ(events[0].medium, "CPU");
  EXPECT_EQ(events[0].block_size, 0u);
  EXPECT_TRUE(events[0].token_ids.empty());
  EXPECT_EQ(events[0].block_hashes, std::vector<uint64_t>{head});
  EXPECT_EQ(events[1].type, wire::EventType::kBlockRemoved);
  EXPECT_EQ(events[1].medium, "GPU");
  EXPECT_EQ(events[1].block_hashes.size(), 2u);
  EXPECT_EQ(events[2].type, wire::EventType::kBlockStored);
  EXPECT_EQ(events[2].medium, "GPU");
  EXPECT_EQ(engine.device_blocks(), 2u);
  EXPECT_EQ(engine.host_blocks(), 1u);
}

TEST(SimulatedEngineTest, DeviceEvictsTheLeastRecentlyUsed) {
  SimulatedEngine engine({.block_size = 4, .device_capacity_blocks = 3});
  std::vector<wire::WireEvent> events;
  for (uint32_t p : {1u, 101u, 201u}) engine.ServePrompt(Tokens(4, p), &events);
  EXPECT_EQ(engine.ServePrompt(Tokens(4, 1), &events).device, 1u);  // touches the first
  events.clear();
  engine.ServePrompt(Tokens(4, 301), &events);  // evicts one: the second, not the first
  ASSERT_EQ(events.size(), 2u);
  ASSERT_EQ(events[0].type, wire::EventType::kBlockRemoved);
  std::vector<wire::WireEvent> probe;
  SimulatedEngine fresh({.block_size = 4});
  fresh.ServePrompt(Tokens(4, 101), &probe);
  const uint64_t second_canonical = *fresh.CanonicalOf(probe[0].block_hashes[0]);
  EXPECT_EQ(events[0].block_hashes, std::vector<uint64_t>{engine.EngineHash(second_canonical)});
  EXPECT_EQ(engine.ServePrompt(Tokens(4, 1), &events).device, 1u);
}

TEST(SimulatedEngineTest, OffloadChainsDeviceHostDiskWithLru) {
  SimulatedEngine engine({.block_size = 4,
                          .device_capacity_blocks = 2,
                          .host_capacity_blocks = 2,
                          .disk_capacity_blocks = 2});
  std::vector<wire::WireEvent> events;
  // Four 2-block prompts: each pushes the previous one a tier down.
  for (uint32_t p = 0; p < 4; ++p) engine.ServePrompt(Tokens(8, 100 * p + 1), &events);
  EXPECT_EQ(engine.device_blocks(), 2u);
  EXPECT_EQ(engine.host_blocks(), 2u);
  EXPECT_EQ(engine.disk_blocks(), 2u);
  // Prompt 0 fell off the end; prompt 1 is on disk, 2 on host, 3 on device.
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(Tokens(8, 1), 4, hashing::LocalHashSeed("", ""), &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  for (Tier tier : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
    EXPECT_FALSE(engine.Holds(tier, engine.EngineHash(seq[0])));
  }
  events.clear();
  const PrefixHit disk_hit = engine.ServePrompt(Tokens(8, 101), &events);
  EXPECT_EQ(disk_hit.disk, 2u);
  EXPECT_EQ(disk_hit.device + disk_hit.host, 0u);
  // Loaded back to the device (stored on GPU with tokens); the disk copy stays.
  bool gpu_store = false;
  for (const auto& e : events) {
    gpu_store |= e.type == wire::EventType::kBlockStored && e.medium == "GPU" &&
                 e.token_ids == Tokens(8, 101);
  }
  EXPECT_TRUE(gpu_store);
  events.clear();
  const PrefixHit again = engine.ServePrompt(Tokens(8, 101), &events);
  EXPECT_EQ(again.device, 2u);
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(engine.disk_blocks(), 2u);
  EXPECT_EQ(engine.host_blocks(), 2u);
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
  for (const int variant : {0, 1, 2, 3}) {
    const bool array_form = variant == 1;
    SimulatedEngine engine({.block_size = 4,
                            .device_capacity_blocks = 24,
                            .host_capacity_blocks = 16,
                            .disk_capacity_blocks = variant >= 2 ? 12u : 0u,
                            .self_describing_offload = variant == 3,
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
      for (Tier tier : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
        std::set<uint64_t> expected;
        for (uint64_t h : engine.EngineHashes(tier)) {
          expected.insert(canonical_of.at(h));
          EXPECT_EQ(engine.CanonicalOf(h), canonical_of.at(h));
        }
        ASSERT_EQ(held[static_cast<int>(tier)], expected)
            << "variant " << variant << " prompt " << r << " tier " << TierName(tier);
      }
    }
    EXPECT_GT(engine.host_blocks(), 0u);  // offload happened, so the host tier was exercised
    if (variant >= 2) {
      EXPECT_GT(engine.disk_blocks(), 0u);
    }
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
