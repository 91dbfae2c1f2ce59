// SglangAliasMap: the rules one by one, then a seeded differential test
// against the naive SglangAliasReference (each fed by its own index: KvIndex
// and the ReferenceIndex oracle). A failure prints its seed; replay with
//   KVINDEX_SEED=<seed> kvindex_sglang_alias_test
#include "shared/compat/sglang_alias_map.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "shared/compat/sglang_alias_reference.h"
#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"

namespace kvindex::compat {
namespace {

PlacementEvent Stored(const std::string& model, const std::string& worker, Tier tier,
                      std::vector<uint64_t> hashes, std::vector<uint64_t> sglang,
                      std::optional<uint64_t> parent = std::nullopt) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = model;
  e.source = {worker, 0};
  e.tier = tier;
  e.block_size = 4;
  e.parent_hash = parent;
  e.block_hashes = std::move(hashes);
  e.sglang_hashes = std::move(sglang);
  return e;
}

PlacementEvent Removed(const std::string& model, const std::string& worker, Tier tier,
                       std::vector<uint64_t> hashes) {
  PlacementEvent e;
  e.kind = PlacementKind::kRemoved;
  e.model = model;
  e.source = {worker, 0};
  e.tier = tier;
  e.block_hashes = std::move(hashes);
  return e;
}

PlacementEvent Cleared(const std::string& model, const std::string& worker) {
  PlacementEvent e;
  e.kind = PlacementKind::kCleared;
  e.model = model;
  e.source = {worker, 0};
  return e;
}

// The index first, then the map, as the apply loop's on_applied does.
class Fixture {
 public:
  Fixture() { index.set_departure_observer(aliases.departure_observer()); }
  index::KvIndex index;
  SglangAliasMap aliases{&index, SglangAliasOptions{.max_entries = 8}};
  void Apply(std::vector<PlacementEvent> events) {
    index.ApplyMessage(events, ++position_);
    aliases.OnApplied(events);
  }
  std::optional<uint64_t> Find(uint64_t sglang) const { return aliases.Find("m", sglang); }

 private:
  uint64_t position_ = 0;
};

TEST(SglangAliasMapTest, TranslatesWhileSomeSourceHoldsTheBlock) {
  Fixture f;
  f.Apply({Stored("m", "a", Tier::kDevice, {11, 12, 13}, {101, 102, 103})});
  f.Apply({Stored("m", "b", Tier::kHost, {11}, {101})});
  std::vector<uint64_t> query = {101, 102, 999, 103};
  EXPECT_EQ(f.aliases.Translate("m", query), 3u);
  EXPECT_EQ(query, (std::vector<uint64_t>{11, 12, 999, 13}));
  std::vector<uint64_t> other = {101};
  EXPECT_EQ(f.aliases.Translate("other-model", other), 0u);
  EXPECT_EQ(other[0], 101u);

  // a's removal: 12 and 13 are held by nobody, 11 still by b.
  f.Apply({Removed("m", "a", Tier::kDevice, {11, 12, 13})});
  EXPECT_EQ(f.Find(101), 11u);
  EXPECT_FALSE(f.Find(102).has_value());
  EXPECT_FALSE(f.Find(103).has_value());
  // b's clear: 11 leaves the index, and its alias with it.
  f.Apply({Cleared("m", "b")});
  EXPECT_FALSE(f.Find(101).has_value());
  const SglangAliasStats stats = f.aliases.Stats();
  EXPECT_EQ(stats.entries, 0u);
  EXPECT_EQ(stats.added, 3u);
  EXPECT_EQ(stats.removed, 3u);
}

TEST(SglangAliasMapTest, StoredAndRemovedInOneMessageLeavesNoAlias) {
  Fixture f;
  f.Apply({Stored("m", "a", Tier::kDevice, {11}, {101}), Removed("m", "a", Tier::kDevice, {11})});
  EXPECT_FALSE(f.Find(101).has_value());
  f.Apply({Removed("m", "a", Tier::kDevice, {11}), Stored("m", "a", Tier::kDevice, {11}, {101})});
  EXPECT_EQ(f.Find(101), 11u);
}

// The index reports the clear's departures while it applies the message,
// before the map learns the message's aliases: they are looked at after.
TEST(SglangAliasMapTest, StoredAndClearedInOneMessageLeavesNoAlias) {
  Fixture f;
  f.Apply({Stored("m", "a", Tier::kDevice, {11, 12}, {101, 102}), Cleared("m", "a")});
  EXPECT_TRUE(f.aliases.Entries().empty());
  f.Apply({Stored("m", "a", Tier::kDevice, {11}, {101}), Cleared("m", "a"),
           Stored("m", "b", Tier::kHost, {12}, {102})});
  EXPECT_FALSE(f.Find(101).has_value());
  EXPECT_EQ(f.Find(102), 12u);
  // Cleared, then stored again: held after the message, kept.
  f.Apply({Cleared("m", "b"), Stored("m", "b", Tier::kHost, {12}, {102})});
  EXPECT_EQ(f.Find(102), 12u);
}

// A stored event the index does not take (here: past its source limit)
// leaves no alias of a block nobody holds; one another source holds stays.
TEST(SglangAliasMapTest, BlocksTheIndexDidNotTakeLeaveNoAlias) {
  index::KvIndex index(index::KvIndexOptions{.max_sources_per_model = 1});
  SglangAliasMap aliases(&index);
  index.set_departure_observer(aliases.departure_observer());
  uint64_t position = 0;
  auto apply = [&](std::vector<PlacementEvent> message) {
    index.ApplyMessage(message, ++position);
    aliases.OnApplied(message);
  };
  apply({Stored("m", "a", Tier::kDevice, {11}, {101})});
  apply({Stored("m", "b", Tier::kDevice, {11, 12}, {101, 102})});  // b: over the limit
  EXPECT_EQ(aliases.Find("m", 101), 11u);                          // a holds 11
  EXPECT_FALSE(aliases.Find("m", 102).has_value());
  EXPECT_EQ(aliases.Stats().entries, 1u);
}

TEST(SglangAliasMapTest, WorkerExpiryAndModelLessClearsDropAliasesInEveryModel) {
  Fixture f;
  f.Apply(
      {Stored("m", "a", Tier::kDevice, {11}, {101}), Stored("n", "a", Tier::kDevice, {21}, {201})});
  PlacementEvent expired;
  expired.kind = PlacementKind::kWorkerExpired;
  expired.source = {"a", 0};
  f.Apply({expired});
  EXPECT_TRUE(f.aliases.Entries().empty());
  f.Apply({Stored("m", "a", Tier::kDevice, {11}, {101})});
  f.Apply({Cleared("", "a")});
  EXPECT_TRUE(f.aliases.Entries().empty());
}

TEST(SglangAliasMapTest, HostileCountsConflictsAndTheCapAreCountedAndLeftOut) {
  Fixture f;
  // Fewer or more SGLang hashes than blocks: the blocks apply, no alias.
  f.Apply({Stored("m", "a", Tier::kDevice, {11, 12}, {101})});
  f.Apply({Stored("m", "a", Tier::kDevice, {13}, {103, 104})});
  EXPECT_TRUE(f.aliases.Entries().empty());
  EXPECT_EQ(f.aliases.Stats().refused_mismatch, 2u);
  EXPECT_EQ(f.index.Stats().entries[0], 3u);

  // One to one: a conflict drops both sides.
  f.Apply({Stored("m", "a", Tier::kDevice, {11}, {101})});
  f.Apply({Stored("m", "a", Tier::kDevice, {14}, {104})});
  f.Apply({Stored("m", "b", Tier::kDevice, {12}, {101})});  // 101 is 11's
  f.Apply({Stored("m", "b", Tier::kDevice, {14}, {109})});  // 14 is 104's
  EXPECT_EQ(f.aliases.Stats().conflicts, 2u);
  EXPECT_TRUE(f.aliases.Entries().empty());
  EXPECT_EQ(f.aliases.Stats().poisoned, 3u);  // 101, 109, 104

  // The cap: 8 per model, whatever the other models hold.
  f.Apply({Stored("n", "a", Tier::kDevice, {21, 22, 23}, {201, 202, 203})});
  std::vector<uint64_t> blocks, sglang;
  for (uint64_t i = 0; i < 10; ++i) {
    blocks.push_back(1000 + i);
    sglang.push_back(5000 + i);
  }
  f.Apply({Stored("m", "c", Tier::kDevice, blocks, sglang)});
  EXPECT_EQ(f.aliases.Stats().entries, 11u);
  EXPECT_EQ(f.aliases.Stats().refused_full, 2u);
  EXPECT_GT(f.aliases.Stats().bytes, 0u);
}

// A node stores its block under another prompt's SGLang hash (forged):
// whoever comes first, sgl-router's hash answers neither block, and never
// again (poisoned), while the index keeps both blocks.
TEST(SglangAliasMapTest, AForgedSglangHashIsNeverAnsweredWhoeverCameFirst) {
  for (bool liar_first : {true, false}) {
    SCOPED_TRACE(liar_first ? "liar first" : "honest first");
    Fixture f;
    const PlacementEvent honest = Stored("m", "honest", Tier::kDevice, {11}, {101});
    const PlacementEvent liar = Stored("m", "liar", Tier::kDevice, {66}, {101});
    f.Apply({liar_first ? liar : honest});
    f.Apply({liar_first ? honest : liar});
    EXPECT_FALSE(f.Find(101).has_value());
    f.Apply({liar});
    f.Apply({honest});
    EXPECT_FALSE(f.Find(101).has_value());
    std::vector<uint64_t> query = {101};
    EXPECT_EQ(f.aliases.Translate("m", query), 0u);
    EXPECT_EQ(f.aliases.Stats().conflicts, 1u);
    EXPECT_EQ(f.aliases.Stats().refused_poisoned, 2u);
    EXPECT_EQ(f.index.Stats().entries[0], 2u);
    // Other hashes still learn; the poison is per model.
    f.Apply({Stored("m", "honest", Tier::kDevice, {12}, {102}),
             Stored("n", "honest", Tier::kDevice, {11}, {101})});
    EXPECT_EQ(f.Find(102), 12u);
    EXPECT_EQ(f.aliases.Find("n", 101), 11u);
  }
}

// A forged hash for an honest block (the block already has its alias):
// both SGLang hashes are poisoned, so the liar cannot block the honest
// alias and then take the block back with its own.
TEST(SglangAliasMapTest, ASecondSglangHashForABlockPoisonsBoth) {
  Fixture f;
  f.Apply({Stored("m", "liar", Tier::kDevice, {11}, {666})});
  f.Apply({Stored("m", "honest", Tier::kDevice, {11}, {101})});
  EXPECT_TRUE(f.aliases.Entries().empty());
  f.Apply({Stored("m", "liar", Tier::kDevice, {11}, {666})});
  f.Apply({Stored("m", "honest", Tier::kDevice, {11}, {101})});
  EXPECT_TRUE(f.aliases.Entries().empty());
  EXPECT_EQ(f.aliases.Stats().poisoned, 2u);
}

// The poisoned hashes are bounded: past max_poisoned the model learns no
// new alias (fail closed), other models still do.
TEST(SglangAliasMapTest, PastMaxPoisonedTheModelLearnsNothingMore) {
  index::KvIndex index;
  SglangAliasMap aliases(&index, SglangAliasOptions{.max_entries = 64, .max_poisoned = 2});
  index.set_departure_observer(aliases.departure_observer());
  uint64_t position = 0;
  auto apply = [&](std::vector<PlacementEvent> message) {
    index.ApplyMessage(message, ++position);
    aliases.OnApplied(message);
  };
  for (uint64_t k = 0; k < 3; ++k) {
    apply({Stored("m", "a", Tier::kDevice, {10 + k}, {100 + k})});
    apply({Stored("m", "b", Tier::kDevice, {20 + k}, {100 + k})});
  }
  EXPECT_EQ(aliases.Stats().poisoned, 2u);
  apply(
      {Stored("m", "a", Tier::kDevice, {30}, {300}), Stored("n", "a", Tier::kDevice, {30}, {300})});
  EXPECT_FALSE(aliases.Find("m", 300).has_value());
  EXPECT_FALSE(aliases.Find("m", 102).has_value());
  EXPECT_EQ(aliases.Find("n", 300), 30u);
}

// Readers translate while the writer adds, removes and clears (TSan's
// case): every translation is either none or the block's canonical hash.
TEST(SglangAliasMapTest, ReadersTranslateWhileTheWriterApplies) {
  index::KvIndex index;
  SglangAliasMap aliases(&index);
  index.set_departure_observer(aliases.departure_observer());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0}, translated{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      std::vector<uint64_t> query(8);
      while (!stop.load()) {
        for (uint64_t i = 0; i < query.size(); ++i) query[i] = 500 + i;
        translated += aliases.Translate("m", query);
        for (uint64_t i = 0; i < query.size(); ++i) {
          if (query[i] != 500 + i && query[i] != 100 + i) ++wrong;
        }
      }
    });
  }
  uint64_t position = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<PlacementEvent> message = {Stored("m", "a", Tier::kDevice,
                                                  {100, 101, 102, 103, 104, 105, 106, 107},
                                                  {500, 501, 502, 503, 504, 505, 506, 507})};
    if (round % 3 == 1) message.push_back(Removed("m", "a", Tier::kDevice, {104, 105, 106, 107}));
    if (round % 3 == 2) message.push_back(Cleared("m", "a"));
    index.ApplyMessage(message, ++position);
    aliases.OnApplied(message);
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(aliases.Stats().entries, 0u);  // the last round cleared
}

// --- differential ---------------------------------------------------------

class Stream {
 public:
  explicit Stream(uint64_t seed) : rng_(seed) {}

  std::vector<PlacementEvent> Message() {
    std::vector<PlacementEvent> events;
    const int n = 1 + static_cast<int>(rng_() % 4);
    for (int i = 0; i < n; ++i) events.push_back(Event());
    return events;
  }

 private:
  static constexpr int kModels = 2, kWorkers = 4, kChains = 6, kChainLength = 8;

  // Chain c of model m: blocks (m, c, 0..kChainLength); SGLang's hash of a
  // block is a function of it, except for the occasional conflict.
  static uint64_t Block(int model, int chain, int i) {
    return 0x1000000 * (model + 1) + 0x1000 * chain + static_cast<uint64_t>(i) + 1;
  }
  uint64_t SglangOf(uint64_t block) {
    if (rng_() % 40 == 0) return 0xA000000000 + rng_() % 64;  // clashes with others
    return 0xB000000000 + block;
  }
  std::string Model(int m) const { return m == 0 ? "m0" : "m1"; }

  PlacementEvent Event() {
    const int kind = static_cast<int>(rng_() % 100);
    const int m = static_cast<int>(rng_() % kModels);
    PlacementEvent e;
    e.model = Model(m);
    e.source = {"w" + std::to_string(rng_() % kWorkers), static_cast<uint32_t>(rng_() % 2)};
    e.tier = static_cast<Tier>(rng_() % kNumTiers);
    const int chain = static_cast<int>(rng_() % kChains);
    const int begin = static_cast<int>(rng_() % kChainLength);
    const int end = begin + 1 + static_cast<int>(rng_() % (kChainLength - begin));
    if (kind < 60) {
      e.kind = PlacementKind::kStored;
      e.block_size = 4;
      if (begin > 0) e.parent_hash = Block(m, chain, begin - 1);
      for (int i = begin; i < end; ++i) {
        e.block_hashes.push_back(Block(m, chain, i));
        e.sglang_hashes.push_back(SglangOf(e.block_hashes.back()));
      }
      if (rng_() % 10 == 0) e.sglang_hashes.clear();       // a vLLM source
      if (rng_() % 30 == 0) e.sglang_hashes.push_back(1);  // hostile count
    } else if (kind < 92) {
      e.kind = PlacementKind::kRemoved;
      for (int i = begin; i < end; ++i) {
        if (rng_() % 3 != 0) e.block_hashes.push_back(Block(m, chain, i));
      }
    } else if (kind < 98) {
      e.kind = PlacementKind::kCleared;
      if (rng_() % 3 == 0) e.model.clear();
    } else {
      e.kind = PlacementKind::kWorkerExpired;
      e.model.clear();
    }
    return e;
  }

  std::mt19937_64 rng_;
};

void RunDifferential(uint64_t seed, int steps, size_t max_entries, size_t max_poisoned,
                     uint32_t max_sources = 4096) {
  SCOPED_TRACE("KVINDEX_SEED=" + std::to_string(seed));
  index::KvIndex index(index::KvIndexOptions{.max_sources_per_model = max_sources});
  index::ReferenceIndex oracle(max_sources);
  SglangAliasMap aliases(
      &index, SglangAliasOptions{.max_entries = max_entries, .max_poisoned = max_poisoned});
  index.set_departure_observer(aliases.departure_observer());
  SglangAliasReference reference(&oracle, max_entries, max_poisoned);
  Stream stream(seed);
  size_t most = 0;
  for (int step = 1; step <= steps; ++step) {
    const std::vector<PlacementEvent> message = stream.Message();
    index.ApplyMessage(message, static_cast<uint64_t>(step));
    oracle.ApplyMessage(message, static_cast<uint64_t>(step));
    aliases.OnApplied(message);
    reference.OnApplied(message);
    const std::vector<SglangAlias> got = aliases.Entries();
    ASSERT_EQ(got, reference.Entries()) << "step " << step;
    ASSERT_EQ(aliases.Stats().entries, got.size()) << "step " << step;
    most = std::max(most, got.size());
    // Translate agrees with the entries.
    for (const SglangAlias& alias : got) {
      uint64_t hash = alias.sglang;
      ASSERT_EQ(aliases.Translate(alias.model, {&hash, 1}), 1u);
      ASSERT_EQ(hash, alias.canonical);
    }
  }
  EXPECT_GT(most, 4u);                       // the stream did build aliases up
  EXPECT_GT(aliases.Stats().conflicts, 0u);  // and contradicted some
}

uint64_t SeedFromEnv(uint64_t fallback) {
  const char* seed = std::getenv("KVINDEX_SEED");
  return seed != nullptr ? std::strtoull(seed, nullptr, 10) : fallback;
}

// Checkpoints (storage/checkpointer.h): the saved state, restored beside the
// same index state, answers and evolves exactly as the map that applied the
// whole log: aliases, poisoned hashes (a later store under a poisoned hash
// stays refused) and a model's closed flag; a damaged state is DataLoss and
// leaves the map empty.
TEST(SglangAliasMapTest, SavedStateRestoresAliasesPoisonAndTheClosedFlag) {
  const SglangAliasOptions options{.max_entries = 8, .max_poisoned = 1};
  const std::vector<std::vector<PlacementEvent>> before = {
      {Stored("m", "a", Tier::kDevice, {11, 12, 13}, {101, 102, 103})},
      {Stored("m", "liar", Tier::kDevice, {66}, {101})},  // 101 poisoned, 11's alias gone
      {Stored("n", "a", Tier::kDevice, {21, 22}, {201, 202})},
      {Stored("n", "liar", Tier::kDevice, {67}, {201})},  // n: poisoned 201
      {Stored("n", "liar", Tier::kDevice, {68}, {202})},  // n: cannot poison 202: closed
  };
  const std::vector<std::vector<PlacementEvent>> after = {
      {Stored("m", "b", Tier::kDevice, {77}, {101})},  // poisoned: refused
      {Stored("n", "b", Tier::kDevice, {23}, {203})},  // closed: refused
      {Stored("m", "b", Tier::kDevice, {14}, {104})},
      {Removed("m", "a", Tier::kDevice, {12})},  // an alias from before the save
  };
  index::KvIndex whole_index, restored_index;
  SglangAliasMap whole(&whole_index, options), restored(&restored_index, options);
  whole_index.set_departure_observer(whole.departure_observer());
  uint64_t position = 0;
  for (const auto& message : before) {
    ++position;
    whole_index.ApplyMessage(message, position);
    whole.OnApplied(message);
    restored_index.ApplyMessage(message, position);  // the checkpointed index
  }
  ASSERT_EQ(whole.Stats().poisoned, 2u);
  const std::string state = whole.SaveState();
  ASSERT_TRUE(restored.RestoreState(state).ok());
  restored_index.set_departure_observer(restored.departure_observer());
  EXPECT_EQ(restored.Entries(), whole.Entries());
  EXPECT_EQ(restored.Stats().entries, whole.Stats().entries);
  EXPECT_EQ(restored.Stats().poisoned, whole.Stats().poisoned);
  for (const auto& message : after) {
    ++position;
    for (auto [index, map] : {std::pair{&whole_index, &whole}, {&restored_index, &restored}}) {
      index->ApplyMessage(message, position);
      map->OnApplied(message);
    }
    EXPECT_EQ(restored.Entries(), whole.Entries()) << "after message " << position;
  }
  EXPECT_EQ(whole.Find("m", 101), std::nullopt);
  EXPECT_EQ(whole.Find("n", 203), std::nullopt);
  EXPECT_EQ(whole.Find("m", 104), 14u);
  EXPECT_EQ(whole.Find("m", 102), std::nullopt);
  EXPECT_EQ(whole.Find("m", 103), 13u);

  // Damaged: truncated, an unknown version, trailing bytes.
  std::vector<std::string> damaged = {state.substr(0, state.size() - 3), state, state + "x"};
  damaged[1][0] = 9;
  for (const std::string& bad : damaged) {
    SglangAliasMap map(&restored_index, options);
    ASSERT_TRUE(map.RestoreState(state).ok());
    const Status status = map.RestoreState(bad);
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_TRUE(map.Entries().empty());
    EXPECT_EQ(map.Stats().entries, 0u);
    EXPECT_EQ(map.Stats().poisoned, 0u);
  }
  SglangAliasMap empty(&restored_index, options);
  ASSERT_TRUE(empty.RestoreState(state).ok());
  ASSERT_TRUE(empty.RestoreState("").ok());
  EXPECT_TRUE(empty.Entries().empty());
}

TEST(SglangAliasMapDifferentialTest, MatchesTheNaiveReference) {
  const uint64_t base = SeedFromEnv(std::random_device{}());
  for (uint64_t k = 0; k < 3; ++k) RunDifferential(base + k, 1000, 1 << 20, 1 << 10);
}

TEST(SglangAliasMapDifferentialTest, MatchesTheNaiveReferenceAtTheCap) {
  const uint64_t base = SeedFromEnv(std::random_device{}());
  for (uint64_t k = 0; k < 2; ++k) RunDifferential(base + k, 1000, 12, 6);
}

// Stored events the index refuses (3 of the stream's 8 sources per model at
// most): their aliases must not outlive the message.
TEST(SglangAliasMapDifferentialTest, MatchesTheNaiveReferenceAtASourceLimit) {
  const uint64_t base = SeedFromEnv(std::random_device{}());
  for (uint64_t k = 0; k < 2; ++k) RunDifferential(base + k, 1000, 1 << 20, 1 << 10, 3);
}

}  // namespace
}  // namespace kvindex::compat
