#include "shared/normalize/source_processor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "shared/hashing/canonical_hash.h"
#include "shared/wire/event_encoder.h"
#include "shared/wire/testing/wire_test_util.h"

namespace kvindex::normalize {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using wire::EncodeOptions;
using wire::EventForm;
using wire::EventType;
using wire::HashEncoding;
using wire::WireEvent;
using wire::testing::GoldenTokens;
using wire::testing::kGoldenHash0;
using wire::testing::kGoldenHash1;
using wire::testing::ReadGolden;

constexpr uint32_t kB = 16;

std::vector<uint32_t> TokenRange(uint32_t first, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  for (uint32_t k = 0; k < count; ++k) tokens[k] = first + k;
  return tokens;
}

// Canonical sequence hashes of `tokens` (block size kB) chained from `parent`.
std::vector<uint64_t> Canonical(const std::vector<uint32_t>& tokens,
                                std::optional<uint64_t> parent = std::nullopt,
                                std::string_view lora = "", std::string_view salt = "") {
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(tokens, kB, hashing::LocalHashSeed(lora, salt), &local);
  hashing::ComputeSequenceHashes(local, parent, &seq);
  return seq;
}

WireEvent Store(std::vector<uint64_t> hashes, std::vector<uint32_t> tokens,
                std::optional<uint64_t> parent = std::nullopt,
                std::optional<std::string> medium = "GPU") {
  WireEvent e;
  e.type = EventType::kBlockStored;
  e.block_hashes = std::move(hashes);
  e.token_ids = std::move(tokens);
  e.block_size = e.token_ids.empty() ? 0 : kB;
  e.parent_block_hash = parent;
  e.medium = std::move(medium);
  return e;
}

WireEvent Placeholder(std::vector<uint64_t> hashes, std::string medium) {
  return Store(std::move(hashes), {}, std::nullopt, std::move(medium));
}

WireEvent Remove(std::vector<uint64_t> hashes, std::optional<std::string> medium = "GPU") {
  WireEvent e;
  e.type = EventType::kBlockRemoved;
  e.block_hashes = std::move(hashes);
  e.medium = std::move(medium);
  return e;
}

WireEvent Clear() {
  WireEvent e;
  e.type = EventType::kAllBlocksCleared;
  return e;
}

// Records every observer call.
class Recorder : public EventObserver {
 public:
  struct Seen {
    EventType type;
    DropReason drop;
    uint32_t dropped_blocks;
    std::optional<Tier> tier;
    std::vector<std::optional<uint64_t>> canonical;
    bool informational;
    size_t placements;
  };
  void OnEvent(const wire::EngineEvent& event, const EventOutcome& outcome) override {
    Seen seen{event.type, outcome.drop,          outcome.dropped_blocks,   outcome.tier,
              {},         outcome.informational, outcome.placements.size()};
    for (const BlockOutcome& block : outcome.blocks) seen.canonical.push_back(block.canonical);
    events.push_back(std::move(seen));
  }
  std::vector<Seen> events;
};

struct Harness {
  explicit Harness(SourceOptions options = Defaults()) : processor(std::move(options), &stats) {
    processor.SetObserver(&recorder);
  }
  static SourceOptions Defaults() {
    SourceOptions options;
    options.worker = "w0";
    options.model = "m";
    options.block_size = kB;
    return options;
  }
  // Encodes and processes one batch; returns the placements it produced.
  std::vector<PlacementEvent> Apply(const std::vector<WireEvent>& events,
                                    const EncodeOptions& options = {},
                                    std::optional<uint32_t> rank = 0u) {
    std::vector<uint8_t> payload;
    wire::EncodeBatch(1.0, events, rank, options, &payload);
    return ApplyBytes(payload);
  }
  std::vector<PlacementEvent> ApplyBytes(const std::vector<uint8_t>& payload) {
    std::vector<PlacementEvent> out;
    last_status = processor.ProcessPayload(payload, &out);
    EXPECT_TRUE(last_status.ok()) << last_status;
    return out;
  }
  uint64_t Dropped(DropReason reason) const {
    return stats.dropped[static_cast<int>(reason)].load();
  }
  uint64_t TotalDropped() const {
    uint64_t total = 0;
    for (const auto& counter : stats.dropped) total += counter.load();
    return total;
  }

  SourceStats stats;
  Recorder recorder;
  SourceProcessor processor;
  Status last_status;
};

PlacementEvent Stored(Tier tier, std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                      uint32_t rank = 0) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "m";
  e.source = {"w0", rank};
  e.tier = tier;
  e.block_size = kB;
  e.parent_hash = parent;
  e.block_hashes = std::move(hashes);
  return e;
}

PlacementEvent Removed(Tier tier, std::vector<uint64_t> hashes, uint32_t rank = 0) {
  PlacementEvent e;
  e.kind = PlacementKind::kRemoved;
  e.model = "m";
  e.source = {"w0", rank};
  e.tier = tier;
  e.block_hashes = std::move(hashes);
  return e;
}

PlacementEvent ClearedEvent(uint32_t rank = 0) {
  PlacementEvent e;
  e.kind = PlacementKind::kCleared;
  e.model = "m";
  e.source = {"w0", rank};
  return e;
}

// ---- golden vectors -------------------------------------------------------

TEST(SourceProcessorTest, EveryStoredGoldenVectorNormalizesIdentically) {
  const std::vector<uint64_t> expected = Canonical(GoldenTokens());
  ASSERT_EQ(expected.size(), 2u);
  for (const char* name :
       {"A_legacy_array_minimal", "A2_legacy_array_engine_shaped", "B_map_minimal",
        "B2_map_engine_shaped", "C_map16_header_engine_shaped"}) {
    SCOPED_TRACE(name);
    Harness h;
    const std::vector<PlacementEvent> out = h.ApplyBytes(ReadGolden(name));
    EXPECT_THAT(out, ElementsAre(Stored(Tier::kDevice, expected, std::nullopt)));
    EXPECT_EQ(h.processor.tracked_blocks(), 2u);
    EXPECT_EQ(h.TotalDropped(), 0u);
    EXPECT_EQ(h.stats.events_received[kEventStored].load(), 1u);
    EXPECT_EQ(h.stats.blocks_received[kBlocksStored].load(), 2u);

    // Then the removal vectors (map and array) remove both and clear.
    for (const char* removal :
         {"D_map_removed_and_cleared", "D2_legacy_array_removed_and_cleared"}) {
      SCOPED_TRACE(removal);
      Harness h2;
      h2.ApplyBytes(ReadGolden(name));
      EXPECT_THAT(h2.ApplyBytes(ReadGolden(removal)),
                  ElementsAre(Removed(Tier::kDevice, expected), ClearedEvent()));
      EXPECT_EQ(h2.processor.tracked_blocks(), 0u);
      EXPECT_EQ(h2.TotalDropped(), 0u);
    }
  }
}

TEST(SourceProcessorTest, EmptyHeartbeatBatchProducesNothing) {
  Harness h;
  EXPECT_TRUE(h.ApplyBytes(ReadGolden("E_map_empty_heartbeat_batch")).empty());
  EXPECT_EQ(h.stats.batches.load(), 1u);
  EXPECT_EQ(h.stats.empty_batches.load(), 1u);
}

TEST(SourceProcessorTest, RemovalWithoutStoreCountsBlocks) {
  Harness h;
  EXPECT_TRUE(h.ApplyBytes(ReadGolden("D_map_removed_and_cleared")) ==
              std::vector<PlacementEvent>{ClearedEvent()});
  EXPECT_EQ(h.Dropped(DropReason::kBlockNotFound), 2u);
}

// ---- re-announcing sources (report_mode=full) -----------------------------

// vLLM with kv_cache_report_mode="full" stores a prefix-cache hit again but
// removes the physical block once. Exact counting keeps it forever (the
// overcount this option exists for); with report_full the first removal
// removes it, on the device tier only.
TEST(SourceProcessorTest, ReportFullSaturatesDeviceCountsAtOne) {
  const std::vector<uint32_t> tokens = TokenRange(1, kB);
  const std::vector<uint64_t> canonical = Canonical(tokens);
  auto run = [&](bool full) {
    SourceOptions options = Harness::Defaults();
    options.report_full = full;
    Harness h(options);
    h.Apply({Store({7}, tokens)});
    // The re-announcement (a reuse) and a host copy of the same block.
    EXPECT_TRUE(h.Apply({Store({7}, tokens)}).empty());
    EXPECT_EQ(h.Apply({Store({7}, {}, std::nullopt, "CPU")}).size(), 1u);
    std::vector<PlacementEvent> removed = h.Apply({Remove({7}, "GPU")});
    // The host copy counts exactly in both modes: two stores, one removal.
    h.Apply({Store({7}, {}, std::nullopt, "CPU")});
    EXPECT_TRUE(h.Apply({Remove({7}, "CPU")}).empty());
    return removed;
  };
  EXPECT_TRUE(run(false).empty()) << "exact counting: still held after its only removal";
  const std::vector<PlacementEvent> removed = run(true);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].kind, PlacementKind::kRemoved);
  EXPECT_EQ(removed[0].tier, Tier::kDevice);
  EXPECT_THAT(removed[0].block_hashes, ElementsAreArray(canonical));
}

// ---- map and array forms, every hash encoding ----------------------------

TEST(SourceProcessorTest, MapAndArrayFormsAndHashEncodingsNormalizeIdentically) {
  const std::vector<uint32_t> tokens = TokenRange(5000, 4 * kB);
  const std::vector<WireEvent> stream1 = {Store({11, 12}, {tokens.begin(), tokens.begin() + 32})};
  const std::vector<WireEvent> stream2 = {
      Store({13, 14}, {tokens.begin() + 32, tokens.end()}, 12),
      Placeholder({11, 12, 13}, "CPU"),
      Remove({12, 13}, "GPU"),
      Remove({99}, "CPU"),
  };
  std::vector<std::vector<PlacementEvent>> results;
  for (EventForm form : {EventForm::kMap, EventForm::kArray}) {
    for (HashEncoding enc :
         {HashEncoding::kUint, HashEncoding::kSigned, HashEncoding::kBin32, HashEncoding::kStr32}) {
      for (bool two : {false, true}) {
        Harness h;
        const EncodeOptions options{.form = form, .hashes = enc, .two_element = two};
        std::vector<PlacementEvent> all = h.Apply(stream1, options);
        for (PlacementEvent& e : h.Apply(stream2, options)) all.push_back(std::move(e));
        results.push_back(all);
        EXPECT_EQ(h.Dropped(DropReason::kBlockNotFound), 1u);
      }
    }
  }
  const std::vector<uint64_t> c = Canonical(tokens);
  EXPECT_THAT(results[0], ElementsAre(Stored(Tier::kDevice, {c[0], c[1]}, std::nullopt),
                                      Stored(Tier::kDevice, {c[2], c[3]}, c[1]),
                                      Stored(Tier::kHost, {c[0], c[1], c[2]}, std::nullopt),
                                      Removed(Tier::kDevice, {c[1], c[2]})));
  for (const auto& result : results) EXPECT_EQ(result, results[0]);
}

// ---- drop reasons and their order ----------------------------------------

struct DropCase {
  const char* name;
  WireEvent event;
  DropReason reason;
  uint64_t count;
};

TEST(SourceProcessorTest, EveryDropReasonInCheckOrder) {
  const std::vector<uint32_t> two_blocks = TokenRange(100, 32);
  auto with = [&](auto mutate) {
    WireEvent e = Store({1, 2}, two_blocks);
    mutate(e);
    return e;
  };
  const std::vector<DropCase> cases = {
      {"group idx", with([](WireEvent& e) { e.group_idx = 1; }), DropReason::kGroupFiltered, 1},
      {"spec kind", with([](WireEvent& e) { e.kv_cache_spec_kind = "sliding_window"; }),
       DropReason::kGroupFiltered, 1},
      // group beats medium
      {"group before medium", with([](WireEvent& e) {
         e.group_idx = 2;
         e.medium = "TAPE";
       }),
       DropReason::kGroupFiltered, 1},
      {"unknown medium", with([](WireEvent& e) { e.medium = "TAPE"; }), DropReason::kUnknownMedium,
       1},
      {"empty medium", with([](WireEvent& e) { e.medium = ""; }), DropReason::kUnknownMedium, 1},
      // medium beats locality
      {"medium before locality", with([](WireEvent& e) {
         e.medium = "gpu";
         e.locality = "REMOTE";
       }),
       DropReason::kUnknownMedium, 1},
      {"remote", with([](WireEvent& e) { e.locality = "REMOTE"; }), DropReason::kRemoteLocality, 1},
      {"unknown locality", with([](WireEvent& e) { e.locality = "local"; }),
       DropReason::kUnknownLocality, 1},
      // locality beats placeholder resolution
      {"locality before placeholder", with([](WireEvent& e) {
         e.token_ids.clear();
         e.block_size = 0;
         e.locality = "REMOTE";
       }),
       DropReason::kRemoteLocality, 1},
      // placeholder (no tokens) beats block_size: counts blocks
      {"unresolved placeholder", with([](WireEvent& e) {
         e.token_ids.clear();
         e.block_size = 32;
       }),
       DropReason::kUnresolvedPlaceholder, 2},
      {"placeholder block size 0", with([](WireEvent& e) { e.block_size = 0; }),
       DropReason::kUnresolvedPlaceholder, 2},
      // block_size beats token count
      {"block size", with([](WireEvent& e) { e.block_size = 32; }), DropReason::kBlockSizeMismatch,
       1},
      // token count beats parent
      {"token count", with([](WireEvent& e) {
         e.token_ids.pop_back();
         e.parent_block_hash = 777;
       }),
       DropReason::kTokenCountMismatch, 1},
      {"token count too many", with([](WireEvent& e) { e.block_hashes = {1}; }),
       DropReason::kTokenCountMismatch, 1},
      {"parent", with([](WireEvent& e) { e.parent_block_hash = 777; }), DropReason::kParentNotFound,
       1},
  };
  for (const DropCase& c : cases) {
    for (EventForm form : {EventForm::kMap, EventForm::kArray}) {
      if (form == EventForm::kArray && c.event.locality.has_value()) continue;  // map-only field
      SCOPED_TRACE(std::string(c.name) + (form == EventForm::kMap ? " map" : " array"));
      Harness h;
      EXPECT_TRUE(h.Apply({c.event}, {.form = form}).empty());
      EXPECT_EQ(h.Dropped(c.reason), c.count);
      EXPECT_EQ(h.TotalDropped(), c.count);
      ASSERT_EQ(h.recorder.events.size(), 1u);
      EXPECT_EQ(h.recorder.events[0].drop, c.reason);
      EXPECT_EQ(h.processor.tracked_blocks(), 0u);
    }
  }
}

TEST(SourceProcessorTest, PartialTailTokensDoNotCountAsABlock) {
  Harness h;
  std::vector<uint32_t> tokens = TokenRange(1, 2 * kB + 5);  // 2 complete blocks + 5
  const std::vector<PlacementEvent> out = h.Apply({Store({1, 2}, tokens)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].block_hashes, Canonical(TokenRange(1, 2 * kB)));
}

TEST(SourceProcessorTest, RemovalDropReasons) {
  Harness h;
  h.Apply({Store({1, 2}, TokenRange(0, 32))});
  WireEvent group = Remove({1});
  group.group_idx = 1;
  WireEvent remote = Remove({1});
  remote.locality = "REMOTE";
  h.Apply({group, Remove({1}, "TAPE"), remote});
  EXPECT_EQ(h.Dropped(DropReason::kGroupFiltered), 1u);
  EXPECT_EQ(h.Dropped(DropReason::kUnknownMedium), 1u);
  EXPECT_EQ(h.Dropped(DropReason::kRemoteLocality), 1u);
  EXPECT_EQ(h.processor.tracked_blocks(), 2u);
  // Count 0 in the tier (held on GPU, removed from CPU) and unknown hashes.
  EXPECT_TRUE(h.Apply({Remove({1, 2, 3}, "CPU")}).empty());
  EXPECT_EQ(h.Dropped(DropReason::kBlockNotFound), 3u);
  EXPECT_EQ(h.recorder.events.back().dropped_blocks, 3u);
}

TEST(SourceProcessorTest, UnknownEventsAndKeysAreCounted) {
  Harness h;
  WireEvent unknown;
  unknown.type = EventType::kUnknown;
  unknown.tag = "BlockInactive";
  WireEvent stored = Store({1}, TokenRange(0, 16));
  stored.unknown_keys = {"future_field"};
  const std::vector<PlacementEvent> out = h.Apply({unknown, stored});
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(h.Dropped(DropReason::kUnknownEvent), 1u);
  EXPECT_EQ(h.stats.events_received[kEventUnknown].load(), 1u);
  EXPECT_EQ(h.stats.unknown_keys.load(), 1u);
}

TEST(SourceProcessorTest, DecodeErrorClearsEveryRankAndAppliesNothing) {
  SourceOptions options = Harness::Defaults();
  options.dp_rank = 1;
  Harness h(options);
  h.Apply({Store({1}, TokenRange(0, 16))}, {}, 3u);
  EXPECT_EQ(h.processor.tracked_blocks(), 1u);
  // A valid stored event followed by a wrong-typed one: nothing is applied.
  std::vector<uint8_t> payload;
  wire::MsgpackWriter w(&payload);
  w.ArrayHeader(3);
  w.Float64(1);
  w.ArrayHeader(2);
  wire::EncodeEvent(Store({2}, TokenRange(16, 16)), {}, &w);
  w.MapHeader(2);
  w.Str("type");
  w.Str("BlockRemoved");
  w.Str("block_hashes");
  w.Str("not an array");
  w.Uint(3);
  std::vector<PlacementEvent> out;
  const Status status = h.processor.ProcessPayload(payload, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), ::testing::StartsWith("byte "));
  EXPECT_THAT(out, ElementsAre(ClearedEvent(1), ClearedEvent(3)));
  EXPECT_EQ(h.processor.tracked_blocks(), 0u);
  EXPECT_EQ(h.Dropped(DropReason::kDecodeError), 1u);
  EXPECT_EQ(h.stats.decode_errors.load(), 1u);
  EXPECT_EQ(h.stats.clears.load(), 2u);
}

// ---- reference counting ---------------------------------------------------

TEST(SourceProcessorTest, ChunkedCpuReannouncementsAndPerCopyRemovals) {
  Harness h;
  const std::vector<uint32_t> tokens = TokenRange(1000, 6 * kB);
  const std::vector<uint64_t> c = Canonical(tokens);
  auto span = [&](size_t first, size_t count) {
    return std::vector<uint32_t>(tokens.begin() + first * kB,
                                 tokens.begin() + (first + count) * kB);
  };
  // GPU holds all six blocks.
  EXPECT_THAT(h.Apply({Store({10, 11, 12, 13, 14, 15}, tokens)}),
              ElementsAre(Stored(Tier::kDevice, c, std::nullopt)));
  // Self-describing CPU offload: overlapping chunks [0..3], [2..5].
  EXPECT_THAT(h.Apply({Store({10, 11, 12, 13}, span(0, 4), std::nullopt, "CPU")}),
              ElementsAre(Stored(Tier::kHost, {c[0], c[1], c[2], c[3]}, std::nullopt)));
  EXPECT_THAT(h.Apply({Store({12, 13, 14, 15}, span(2, 4), 11, "CPU")}),
              ElementsAre(Stored(Tier::kHost, {c[4], c[5]}, c[3])));
  // Full report mode re-announces GPU blocks: nothing new.
  EXPECT_TRUE(h.Apply({Store({10, 11}, span(0, 2))}).empty());
  // Per-copy CPU removals: blocks 2, 3 were announced twice on CPU.
  EXPECT_TRUE(h.Apply({Remove({12, 13}, "CPU")}).empty());
  EXPECT_THAT(h.Apply({Remove({10, 11, 12, 13}, "CPU")}),
              ElementsAre(Removed(Tier::kHost, {c[0], c[1], c[2], c[3]})));
  EXPECT_THAT(h.Apply({Remove({14, 15}, "CPU")}), ElementsAre(Removed(Tier::kHost, {c[4], c[5]})));
  EXPECT_TRUE(h.Apply({Remove({14}, "CPU")}).empty());
  EXPECT_EQ(h.Dropped(DropReason::kBlockNotFound), 1u);
  // GPU: 10, 11 held twice.
  EXPECT_THAT(h.Apply({Remove({10, 11, 12}, "GPU")}), ElementsAre(Removed(Tier::kDevice, {c[2]})));
  EXPECT_EQ(h.processor.tracked_blocks(), 5u);  // 10, 11 (count 1), 13, 14, 15
  EXPECT_THAT(h.Apply({Remove({10, 11, 13, 14, 15}, "GPU")}),
              ElementsAre(Removed(Tier::kDevice, {c[0], c[1], c[3], c[4], c[5]})));
  EXPECT_EQ(h.processor.tracked_blocks(), 0u);
  EXPECT_EQ(h.stats.placements_stored.load(), 3u);
  EXPECT_EQ(h.stats.placements_removed.load(), 4u);
}

TEST(SourceProcessorTest, NonContiguousNewBlocksSplitIntoChainedRuns) {
  Harness h;
  const std::vector<uint32_t> tokens = TokenRange(7, 6 * kB);
  const std::vector<uint64_t> c = Canonical(tokens);
  h.Apply({Store({1, 2, 3, 4, 5, 6}, tokens, std::nullopt, "CPU")});
  // GPU already holds blocks 2 and 3 (indices 2, 3) from an earlier event.
  h.Apply({Placeholder({3, 4}, "GPU")});
  EXPECT_THAT(h.Apply({Store({1, 2, 3, 4, 5, 6}, tokens)}),
              ElementsAre(Stored(Tier::kDevice, {c[0], c[1]}, std::nullopt),
                          Stored(Tier::kDevice, {c[4], c[5]}, c[3])));
}

TEST(SourceProcessorTest, PlaceholdersResolveThroughTheMap) {
  Harness h;
  const std::vector<uint32_t> tokens = TokenRange(300, 4 * kB);
  const std::vector<uint64_t> c = Canonical(tokens);
  h.Apply({Store({21, 22, 23, 24}, tokens)});
  // CPU placeholders (block_size 0, no tokens): blocks 2, 3 plus an unknown.
  EXPECT_THAT(h.Apply({Placeholder({23, 24, 99}, "CPU")}),
              ElementsAre(Stored(Tier::kHost, {c[2], c[3]}, c[1])));
  EXPECT_EQ(h.Dropped(DropReason::kUnresolvedPlaceholder), 1u);
  EXPECT_EQ(h.recorder.events.back().drop, DropReason::kUnresolvedPlaceholder);
  EXPECT_EQ(h.recorder.events.back().dropped_blocks, 1u);
  EXPECT_EQ(h.stats.placeholder_blocks_resolved.load(), 2u);
  // GPU evicts; the engine hash stays mapped while CPU holds the block.
  EXPECT_THAT(h.Apply({Remove({21, 22, 23, 24})}), ElementsAre(Removed(Tier::kDevice, c)));
  EXPECT_EQ(h.processor.tracked_blocks(), 2u);
  // Disk placeholder resolves through the entry CPU keeps alive.
  EXPECT_THAT(h.Apply({Placeholder({24}, "DISK")}), ElementsAre(Stored(Tier::kDisk, {c[3]}, c[2])));
  EXPECT_THAT(h.Apply({Remove({23, 24}, "CPU"), Remove({24}, "DISK")}),
              ElementsAre(Removed(Tier::kHost, {c[2], c[3]}), Removed(Tier::kDisk, {c[3]})));
  EXPECT_EQ(h.processor.tracked_blocks(), 0u);
  // Gone from every tier: a later placeholder no longer resolves.
  EXPECT_TRUE(h.Apply({Placeholder({24}, "CPU")}).empty());
  EXPECT_EQ(h.Dropped(DropReason::kUnresolvedPlaceholder), 2u);
}

TEST(SourceProcessorTest, TwoEngineHashesSharingOneCanonicalHash) {
  // Multimodal blocks with equal placeholder tokens: different engine hashes
  // (extra_keys differ), one canonical hash. Published once, removed once.
  Harness h;
  const std::vector<uint32_t> tokens = TokenRange(0, kB);
  const std::vector<uint64_t> c = Canonical(tokens);
  EXPECT_EQ(h.Apply({Store({1}, tokens)}).size(), 1u);
  EXPECT_TRUE(h.Apply({Store({2}, tokens)}).empty());
  EXPECT_TRUE(h.Apply({Remove({1})}).empty());
  EXPECT_EQ(h.processor.tracked_blocks(), 1u);
  EXPECT_THAT(h.Apply({Remove({2})}), ElementsAre(Removed(Tier::kDevice, c)));
  EXPECT_EQ(h.processor.tracked_blocks(), 0u);
}

// An SGLang source publishes its engine hashes (sgl-router's) beside the
// canonical ones, aligned block for block, also in split runs, resolved
// placeholders and snapshots; other engines never do.
TEST(SourceProcessorTest, SglangSourcesPublishTheirEngineHashesAligned) {
  SourceOptions options = Harness::Defaults();
  options.engine = wire::EngineKind::kSglang;
  Harness h(options);
  const std::vector<uint32_t> tokens = TokenRange(7, 6 * kB);
  const std::vector<uint64_t> c = Canonical(tokens);
  auto with = [](PlacementEvent e, std::vector<uint64_t> sglang) {
    e.sglang_hashes = std::move(sglang);
    return e;
  };
  EXPECT_THAT(h.Apply({Store({1, 2, 3, 4, 5, 6}, tokens, std::nullopt, "CPU")}),
              ElementsAre(with(Stored(Tier::kHost, c, std::nullopt), {1, 2, 3, 4, 5, 6})));
  h.Apply({Placeholder({3, 4}, "GPU")});
  EXPECT_THAT(h.Apply({Store({1, 2, 3, 4, 5, 6}, tokens)}),
              ElementsAre(with(Stored(Tier::kDevice, {c[0], c[1]}, std::nullopt), {1, 2}),
                          with(Stored(Tier::kDevice, {c[4], c[5]}, c[3]), {5, 6})));
  EXPECT_THAT(h.Apply({Placeholder({6, 99}, "DISK")}),
              ElementsAre(with(Stored(Tier::kDisk, {c[5]}, c[4]), {6})));
  // Removals carry canonical hashes only.
  EXPECT_THAT(h.Apply({Remove({6}, "DISK")}), ElementsAre(Removed(Tier::kDisk, {c[5]})));
  std::vector<PlacementEvent> snapshot;
  h.processor.Snapshot(&snapshot);
  size_t blocks = 0;
  for (const PlacementEvent& e : snapshot) {
    if (e.kind != PlacementKind::kStored) continue;
    ASSERT_EQ(e.sglang_hashes.size(), e.block_hashes.size());
    for (size_t i = 0; i < e.block_hashes.size(); ++i) {
      const size_t k = std::find(c.begin(), c.end(), e.block_hashes[i]) - c.begin();
      EXPECT_EQ(e.sglang_hashes[i], k + 1);
      ++blocks;
    }
  }
  EXPECT_EQ(blocks, 6u + 6u);  // host: all six; device: all six

  Harness vllm;  // the default engine
  for (const PlacementEvent& e : vllm.Apply({Store({1, 2}, TokenRange(7, 2 * kB))})) {
    EXPECT_TRUE(e.sglang_hashes.empty());
  }
}

TEST(SourceProcessorTest, ClearedResetsTheRankAndTheMap) {
  Harness h;
  h.Apply({Store({1, 2}, TokenRange(0, 32))});
  EXPECT_THAT(h.Apply({Clear()}), ElementsAre(ClearedEvent()));
  EXPECT_EQ(h.processor.tracked_blocks(), 0u);
  // The parent is gone with the rest.
  EXPECT_TRUE(h.Apply({Store({3}, TokenRange(32, 16), 2)}).empty());
  EXPECT_EQ(h.Dropped(DropReason::kParentNotFound), 1u);
  EXPECT_EQ(h.stats.events_received[kEventCleared].load(), 1u);
}

TEST(SourceProcessorTest, EnvelopeRankWinsAndClearAllCoversEveryRank) {
  SourceOptions options = Harness::Defaults();
  options.dp_rank = 2;
  Harness h(options);
  const std::vector<uint32_t> tokens = TokenRange(0, kB);
  const std::vector<uint64_t> c = Canonical(tokens);
  EXPECT_THAT(h.Apply({Store({1}, tokens)}, {}, 5u),
              ElementsAre(Stored(Tier::kDevice, c, std::nullopt, 5)));
  EXPECT_THAT(h.Apply({Store({1}, tokens)}, {}, std::nullopt),
              ElementsAre(Stored(Tier::kDevice, c, std::nullopt, 2)));
  EXPECT_THAT(h.Apply({Store({1}, tokens)}, {.two_element = true}), ElementsAre());
  // Ranks are independent: rank 5's parent is unknown to rank 2.
  EXPECT_TRUE(h.Apply({Store({9}, TokenRange(16, 16), 1)}, {}, 0u).empty());
  std::vector<PlacementEvent> out;
  h.processor.ClearAll(&out);
  EXPECT_THAT(out, ElementsAre(ClearedEvent(0), ClearedEvent(2), ClearedEvent(5)));
}

// ---- hashing inputs -------------------------------------------------------

TEST(SourceProcessorTest, EagleBigramsHashWindowsOfBPlusOne) {
  Harness h;
  WireEvent e = Store({1, 2}, TokenRange(40, 2 * kB + 1));  // 2B pairs -> 2B+1 flat tokens
  e.bigram = true;
  std::vector<uint64_t> local, expected;
  hashing::ComputeEagleLocalHashes(e.token_ids, kB, hashing::kRootSeed, &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &expected);
  ASSERT_EQ(expected.size(), 2u);
  EXPECT_THAT(h.Apply({e}), ElementsAre(Stored(Tier::kDevice, expected, std::nullopt)));
  EXPECT_NE(expected, Canonical(TokenRange(40, 2 * kB)));
}

TEST(SourceProcessorTest, LoraNameAndCacheSaltSeedTheLocalHash) {
  const std::vector<uint32_t> tokens = TokenRange(1, 2 * kB);
  for (auto [lora, salt] :
       {std::pair{"my-lora", ""}, std::pair{"", "salt"}, std::pair{"my-lora", "salt"}}) {
    Harness h;
    WireEvent e = Store({1, 2}, tokens);
    if (*lora) e.lora_name = lora;
    if (*salt) e.cache_salt = salt;
    const std::vector<uint64_t> expected = Canonical(tokens, std::nullopt, lora, salt);
    EXPECT_NE(expected, Canonical(tokens));
    EXPECT_THAT(h.Apply({e}), ElementsAre(Stored(Tier::kDevice, expected, std::nullopt)));
  }
}

TEST(SourceProcessorTest, TwoWorkersWithDifferentEngineHashesAgreeOnCanonicalHashes) {
  SourceOptions a = Harness::Defaults();
  SourceOptions b = Harness::Defaults();
  b.worker = "w1";
  b.engine = wire::EngineKind::kSglang;
  Harness vllm(a), sglang(b);
  const std::vector<uint32_t> tokens = TokenRange(9, 3 * kB);
  std::vector<PlacementEvent> x =
      vllm.Apply({Store({0xaaaa, 0xbbbb}, {tokens.begin(), tokens.end() - kB})});
  for (auto& e : vllm.Apply({Store({0xcccc}, {tokens.end() - kB, tokens.end()}, 0xbbbb)})) {
    x.push_back(e);
  }
  // SGLang: negative signed hashes, one event, map form.
  const std::vector<PlacementEvent> y = sglang.Apply(
      {Store({static_cast<uint64_t>(-5), static_cast<uint64_t>(-6), static_cast<uint64_t>(-7)},
             tokens)},
      {.hashes = HashEncoding::kSigned});
  std::vector<uint64_t> hx, hy;
  for (const auto& e : x) hx.insert(hx.end(), e.block_hashes.begin(), e.block_hashes.end());
  for (const auto& e : y) hy.insert(hy.end(), e.block_hashes.begin(), e.block_hashes.end());
  EXPECT_EQ(hx, hy);
  EXPECT_EQ(hx, Canonical(tokens));
  EXPECT_EQ(x[1].parent_hash, hx[1]);
}

TEST(SourceProcessorTest, ObserverSeesInformationalHashesForDroppedEvents) {
  Harness h;
  WireEvent e = Store({1, 2}, TokenRange(100, 32));
  e.group_idx = 1;
  EXPECT_TRUE(h.Apply({e}).empty());
  const Recorder::Seen& seen = h.recorder.events.back();
  EXPECT_EQ(seen.drop, DropReason::kGroupFiltered);
  EXPECT_TRUE(seen.informational);
  const std::vector<uint64_t> c = Canonical(TokenRange(100, 32));
  EXPECT_THAT(seen.canonical, ElementsAre(c[0], c[1]));
}

TEST(SourceProcessorTest, OptionsValidate) {
  SourceOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.block_size = 0;
  EXPECT_FALSE(options.Validate().ok());
}

// ---- randomized check against a naive multiset model -----------------------

TEST(SourceProcessorTest, RandomStreamsMatchANaiveReferenceCount) {
  // Universe: 4 chains of 8 blocks; engine hash = chain*100 + i (1:1 with
  // canonical). The reference model counts (tier, engine hash) references;
  // the published set must always equal {(tier, canonical) : count > 0}.
  const uint32_t kSeed = 20260130;
  std::mt19937 rng(kSeed);
  const char* mediums[] = {"GPU", "CPU", "DISK"};
  const Tier tiers[] = {Tier::kDevice, Tier::kHost, Tier::kDisk};
  std::vector<std::vector<uint32_t>> chain_tokens;
  std::vector<std::vector<uint64_t>> chain_canonical;
  for (uint32_t chain = 0; chain < 4; ++chain) {
    chain_tokens.push_back(TokenRange(chain * 10000, 8 * kB));
    chain_canonical.push_back(Canonical(chain_tokens.back()));
  }
  Harness h;
  std::map<std::pair<int, uint64_t>, int> model;  // (tier, engine) -> count
  std::set<std::pair<int, uint64_t>> published;   // (tier, canonical)
  for (int step = 0; step < 3000; ++step) {
    const uint32_t chain = rng() % 4;
    const int t = static_cast<int>(rng() % 3);
    const uint32_t first = rng() % 8;
    const uint32_t count = 1 + rng() % (8 - first);
    std::vector<uint64_t> engine;
    for (uint32_t i = first; i < first + count; ++i) engine.push_back(chain * 100 + i);
    WireEvent e;
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 4) {
      // Stored with tokens; a parent the model may or may not know.
      e = Store(engine,
                {chain_tokens[chain].begin() + first * kB,
                 chain_tokens[chain].begin() + (first + count) * kB},
                first == 0 ? std::nullopt : std::optional<uint64_t>(chain * 100 + first - 1),
                mediums[t]);
      bool parent_known = first == 0;
      for (int tt = 0; tt < 3 && !parent_known; ++tt) {
        parent_known = model[{tt, chain * 100 + first - 1}] > 0;
      }
      if (parent_known) {
        for (uint64_t hash : engine) ++model[{t, hash}];
      }
    } else if (kind < 6) {
      e = Placeholder(engine, mediums[t]);
      for (uint64_t hash : engine) {
        bool known = false;
        for (int tt = 0; tt < 3; ++tt) known = known || model[{tt, hash}] > 0;
        if (known) ++model[{t, hash}];
      }
    } else if (kind < 9) {
      e = Remove(engine, mediums[t]);
      for (uint64_t hash : engine) {
        if (model[{t, hash}] > 0) --model[{t, hash}];
      }
    } else {
      e = Clear();
      model.clear();
    }
    for (const PlacementEvent& p :
         h.Apply({e}, {.form = rng() % 2 ? EventForm::kMap : EventForm::kArray})) {
      const int pt = static_cast<int>(p.tier);
      if (p.kind == PlacementKind::kCleared) published.clear();
      for (uint64_t c : p.block_hashes) {
        if (p.kind == PlacementKind::kStored) {
          EXPECT_TRUE(published.insert({pt, c}).second) << "double store, step " << step;
        } else {
          EXPECT_EQ(published.erase({pt, c}), 1u) << "removal of absent block, step " << step;
        }
      }
    }
    std::set<std::pair<int, uint64_t>> expected;
    size_t live_engine = 0;
    std::set<uint64_t> engine_live;
    for (const auto& [key, n] : model) {
      if (n <= 0) continue;
      const auto [tt, hash] = key;
      expected.insert({static_cast<int>(tiers[tt]), chain_canonical[hash / 100][hash % 100]});
      engine_live.insert(hash);
    }
    live_engine = engine_live.size();
    ASSERT_EQ(published, expected) << "seed " << kSeed << " step " << step;
    ASSERT_EQ(h.processor.tracked_blocks(), live_engine) << "step " << step;
  }
}

// ---- saved state (a checkpoint of an embedded router) ----------------------

// A state with two ranks, every tier, a shared canonical hash (two engine
// hashes with the same tokens) and a chain whose parent is known.
void FillForSave(Harness& h) {
  h.Apply({Store({1, 2, 3}, TokenRange(0, 48)), Store({7}, TokenRange(0, 16)),
           Placeholder({2}, "CPU"), Store({4}, TokenRange(48, 16), 3)});
  h.Apply({Store({11, 12}, TokenRange(100, 32), std::nullopt, "DISK")}, {}, 1u);
  h.Apply({Store({21}, TokenRange(200, 16), std::nullopt, "GPU")}, {}, 1u);
}

// What both processors do next: removals (1 leaves its canonical block held
// through 7),
// a store chained on a saved block, a placeholder re-announcement.
std::vector<WireEvent> NextEvents() {
  return {Remove({1}), Store({5}, TokenRange(64, 16), 4), Placeholder({3}, "CPU"),
          Remove({2}, "CPU"), Remove({4})};
}

TEST(SourceProcessorTest, SavedStateContinuesExactlyLikeTheOriginal) {
  // At the block cap: the blocks held per tier must come back too.
  SourceOptions options = Harness::Defaults();
  options.max_blocks_per_tier = 4;
  Harness original(options);
  FillForSave(original);
  std::string state;
  original.processor.SaveState(&state);

  Harness restored(options);
  ASSERT_TRUE(restored.processor.RestoreState(state).ok());
  EXPECT_EQ(restored.processor.tracked_blocks(), original.processor.tracked_blocks());
  EXPECT_EQ(restored.processor.HeldCounts(), original.processor.HeldCounts());
  std::vector<PlacementEvent> a, b;
  original.processor.Snapshot(&a);
  restored.processor.Snapshot(&b);
  EXPECT_EQ(a, b);
  // The same next batches give the same placements, on both ranks.
  EXPECT_EQ(restored.Apply(NextEvents()), original.Apply(NextEvents()));
  EXPECT_EQ(restored.Apply({Remove({11, 12}, "DISK")}, {}, 1u),
            original.Apply({Remove({11, 12}, "DISK")}, {}, 1u));
  std::string again;
  restored.processor.SaveState(&again);
  std::string original_again;
  original.processor.SaveState(&original_again);
  Harness twice;
  ASSERT_TRUE(twice.processor.RestoreState(again).ok());
  EXPECT_EQ(twice.processor.HeldCounts(), original.processor.HeldCounts());
}

TEST(SourceProcessorTest, HeldCountsArePerRankAndTier) {
  Harness h;
  FillForSave(h);
  // rank 0: GPU {1,2,3,4} (7 has 1's tokens: one canonical block, counted
  // twice), CPU {2}; rank 1: GPU {21}, DISK {11,12}.
  const std::vector<std::pair<uint64_t, uint64_t>> expected = {
      {0 << 2 | 0, 4}, {0 << 2 | 1, 1}, {1 << 2 | 0, 1}, {1 << 2 | 2, 2}};
  EXPECT_EQ(h.processor.HeldCounts(), expected);
}

TEST(SourceProcessorTest, DamagedSavedStateIsRefusedAndLeavesNothing) {
  Harness original;
  FillForSave(original);
  std::string state;
  original.processor.SaveState(&state);
  for (size_t cut : {size_t{0}, size_t{1}, state.size() / 2, state.size() - 1}) {
    Harness h;
    FillForSave(h);
    const Status status = h.processor.RestoreState(std::string_view(state).substr(0, cut));
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << cut;
    EXPECT_EQ(h.processor.tracked_blocks(), 0u) << cut;
  }
  std::string versioned = state;
  versioned[0] = 9;
  Harness h;
  EXPECT_EQ(h.processor.RestoreState(versioned).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(h.processor.RestoreState(state + "x").code(), absl::StatusCode::kDataLoss);
  // A restored state after a refused one is whole again.
  ASSERT_TRUE(h.processor.RestoreState(state).ok());
  EXPECT_EQ(h.processor.tracked_blocks(), original.processor.tracked_blocks());
}

}  // namespace
}  // namespace kvindex::normalize
