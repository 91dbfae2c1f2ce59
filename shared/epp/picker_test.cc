#include "shared/epp/picker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "shared/epp/load_table.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/index/kv_index.h"

namespace kvindex::epp {
namespace {

constexpr uint32_t kBlock = 4;

PickInput In(std::string_view model, const std::vector<uint32_t>* tokens = nullptr,
             const std::vector<std::string>* subset = nullptr) {
  PickInput input;
  input.model = model;
  input.tokens = tokens;
  input.subset = subset;
  return input;
}

std::vector<uint64_t> SeqHashes(const std::vector<uint32_t>& tokens) {
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(tokens, kBlock, hashing::LocalHashSeed("", ""), &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  return seq;
}

class PickerTest : public ::testing::Test {
 protected:
  void Store(const std::string& worker, Tier tier, std::vector<uint64_t> hashes) {
    PlacementEvent e;
    e.kind = PlacementKind::kStored;
    e.model = "m";
    e.source = {worker, 0};
    e.tier = tier;
    e.block_size = kBlock;
    e.block_hashes = std::move(hashes);
    index_.Apply(e, ++seq_);
  }
  void SetUp() override {
    std::vector<Endpoint> endpoints;
    for (int i = 0; i < 3; ++i) {
      Endpoint e;
      e.address = "10.0.0." + std::to_string(i + 1) + ":8000";
      e.source.worker = "w" + std::to_string(i);
      e.model = "m";
      endpoints.push_back(std::move(e));
    }
    endpoints_.SetStatic(std::move(endpoints));
  }
  index::KvIndex index_;
  uint64_t seq_ = 0;
  EndpointTable endpoints_;
  std::vector<uint32_t> tokens_ = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
};

// Candidates left out before scoring (an unhealthy engine, one at its
// in-flight limit) must not shift the index's rows onto the wrong
// endpoints: the engine that holds the prefix is still the one scored.
TEST_F(PickerTest, PrefixScoresFollowTheirSourceAfterCandidatesAreLeftOut) {
  Store("w1", Tier::kDevice, SeqHashes(tokens_));
  LoadTable load(std::chrono::seconds(10));
  codec::EngineLoad sick;
  sick.healthy = false;
  load.Update({"w0", 0}, sick, LoadTable::Clock::now());
  Picker picker({}, &index_, &endpoints_, &load);
  auto pick = picker.Pick(In("m", &tokens_));
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(pick->endpoints[0], "10.0.0.2:8000");
  EXPECT_EQ(pick->matched_blocks, 4u);
  // The same with w0 at its in-flight limit instead (w0 healthy again).
  load.Update({"w0", 0}, codec::EngineLoad{}, LoadTable::Clock::now());
  PickerConfig limited;
  limited.max_inflight_per_endpoint = 1;
  Picker limited_picker(limited, &index_, &endpoints_, &load);
  const std::vector<std::string> only_w0 = {"10.0.0.1:8000"};
  auto first = limited_picker.Pick(In("m", nullptr, &only_w0));  // takes w0's one slot
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->endpoints[0], "10.0.0.1:8000");
  auto second = limited_picker.Pick(In("m", &tokens_));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->endpoints[0], "10.0.0.2:8000");
  EXPECT_EQ(second->matched_blocks, 4u);
}

// Two ranks of one worker behind one address fill the best places: the
// fallback is still the next best other address, not any other.
TEST_F(PickerTest, SharedAddressLeavesRoomForTheNextBestFallback) {
  std::vector<Endpoint> endpoints;
  for (const auto& [address, worker, rank] : {std::tuple{"10.0.0.1:8000", "w0", 0u},
                                              {"10.0.0.1:8000", "w0", 1u},
                                              {"10.0.0.2:8000", "w1", 0u},
                                              {"10.0.0.3:8000", "w2", 0u},
                                              {"10.0.0.4:8000", "w3", 0u}}) {
    Endpoint e;
    e.address = address;
    e.source = {worker, rank};
    e.model = "m";
    endpoints.push_back(std::move(e));
  }
  endpoints_.SetStatic(std::move(endpoints));
  const std::vector<uint64_t> hashes = SeqHashes(tokens_);
  for (uint32_t rank : {0u, 1u}) {
    PlacementEvent e;
    e.kind = PlacementKind::kStored;
    e.model = "m";
    e.source = {"w0", rank};
    e.tier = Tier::kDevice;
    e.block_size = kBlock;
    e.block_hashes = hashes;
    index_.Apply(e, ++seq_);
  }
  Store("w2", Tier::kDevice, {hashes[0]});  // w2 holds a quarter: the next best
  for (uint32_t fallbacks : {1u, 2u}) {
    PickerConfig config;
    config.fallbacks = fallbacks;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      config.seed = seed;
      Picker picker(config, &index_, &endpoints_);
      auto pick = picker.Pick(In("m", &tokens_));
      ASSERT_TRUE(pick.ok()) << pick.status();
      ASSERT_EQ(pick->endpoints.size(), fallbacks + 1);
      EXPECT_EQ(pick->endpoints[0], "10.0.0.1:8000");
      EXPECT_EQ(pick->endpoints[1], "10.0.0.3:8000") << "seed " << seed;
    }
  }
}

// Two endpoints of one source (the same engine behind two addresses): the
// index's row scores both, not only the first.
TEST_F(PickerTest, EverySourceEndpointScored) {
  std::vector<Endpoint> endpoints;
  for (const auto& [address, worker] : {std::pair{"10.0.0.1:8000", "w0"},
                                        {"10.0.0.2:8000", "w1"},
                                        {"10.0.0.3:8000", "w2"},
                                        {"10.0.0.4:8000", "w1"}}) {
    Endpoint e;
    e.address = address;
    e.source.worker = worker;
    e.model = "m";
    endpoints.push_back(std::move(e));
  }
  endpoints_.SetStatic(std::move(endpoints));
  Store("w1", Tier::kDevice, SeqHashes(tokens_));
  Picker picker({}, &index_, &endpoints_);
  auto pick = picker.Pick(In("m", &tokens_));
  ASSERT_TRUE(pick.ok()) << pick.status();
  ASSERT_GE(pick->endpoints.size(), 2u);
  std::vector<std::string> best(pick->endpoints.begin(), pick->endpoints.begin() + 2);
  std::sort(best.begin(), best.end());
  EXPECT_EQ(best, (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.4:8000"}));
}

TEST_F(PickerTest, PrefixWinsWeightedByTier) {
  const std::vector<uint64_t> seq = SeqHashes(tokens_);
  Store("w1", Tier::kHost, seq);                         // 4 blocks in host: 0.8
  Store("w2", Tier::kDevice, {seq[0], seq[1], seq[2]});  // 3 blocks on device: 0.75
  Picker picker({}, &index_, &endpoints_);
  auto pick = picker.Pick(In("m", &tokens_));
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_TRUE(pick->prefix_scored);
  EXPECT_EQ(pick->request_blocks, 4u);
  EXPECT_EQ(pick->matched_blocks, 4u);
  ASSERT_EQ(pick->endpoints.size(), 3u);
  EXPECT_EQ(pick->endpoints[0], "10.0.0.2:8000");
  EXPECT_EQ(pick->endpoints[1], "10.0.0.3:8000");
  EXPECT_EQ(pick->endpoints[2], "10.0.0.1:8000");
  EXPECT_EQ(picker.InFlight("10.0.0.2:8000"), 1);
  picker.Release("10.0.0.2:8000");
  EXPECT_EQ(picker.InFlight("10.0.0.2:8000"), 0);

  // Host weighted below 0.75 / 1.0: the device holder wins.
  PickerConfig config;
  config.tier_weights[1] = 0.5;
  Picker host_cheap(config, &index_, &endpoints_);
  EXPECT_EQ(host_cheap.Pick(In("m", &tokens_))->endpoints[0], "10.0.0.3:8000");
}

// The lookup and predict on route hash the request once, seeded by the
// cache salt and the alias's LoRA adapter, over its full blocks only.
TEST_F(PickerTest, SaltAndLoraSeedTheLookupAndThePrediction) {
  std::vector<uint32_t> tokens = tokens_;
  tokens.push_back(17);  // a partial fifth block: not hashed
  auto seeded = [&](std::string_view lora, std::string_view salt) {
    std::vector<uint64_t> local, seq;
    hashing::ComputeLocalHashes(tokens_, kBlock, hashing::LocalHashSeed(lora, salt), &local);
    hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
    return seq;
  };
  Store("w1", Tier::kDevice, seeded("", "s"));
  Store("w2", Tier::kDevice, seeded("adapter", ""));
  PickerConfig config;
  config.aliases["chat"] = {.model = "m", .lora = "adapter"};
  config.speculative.ttl = std::chrono::seconds(60);
  SpeculativeCache cache(config.speculative);
  Picker picker(config, &index_, &endpoints_);
  picker.SetSpeculative(&cache);
  PickInput salted = In("m", &tokens);
  salted.cache_salt = "s";
  auto pick = picker.Pick(salted);
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(pick->request_blocks, 4u);
  EXPECT_EQ(pick->matched_blocks, 4u);
  EXPECT_EQ(pick->speculative_blocks, 0u);
  EXPECT_EQ(pick->endpoints[0], "10.0.0.2:8000");
  pick = picker.Pick(In("chat", &tokens));
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(pick->matched_blocks, 4u);
  EXPECT_EQ(pick->endpoints[0], "10.0.0.3:8000");
  // Unsalted base model: the index holds none of it; the pick is recorded
  // and the same request next time finds it in speculation only.
  pick = picker.Pick(In("m", &tokens));
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_TRUE(pick->prefix_scored);
  EXPECT_EQ(pick->matched_blocks, 0u);
  const std::string first = pick->endpoints[0];
  pick = picker.Pick(In("m", &tokens));
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(pick->speculative_blocks, 4u);
  EXPECT_EQ(pick->endpoints[0], first);
  // Another salt: the prediction is not the salted request's.
  PickInput other = In("m", &tokens);
  other.cache_salt = "u";
  pick = picker.Pick(other);
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(pick->matched_blocks, 0u);
  EXPECT_EQ(pick->speculative_blocks, 0u);
}

TEST_F(PickerTest, InFlightSpreadsTiesAndSubsetRestricts) {
  PickerConfig config;
  config.fallbacks = 0;
  Picker picker(config, &index_, &endpoints_);
  std::vector<std::string> picked;
  for (int i = 0; i < 3; ++i) picked.push_back(picker.Pick(In("m"))->endpoints[0]);
  std::sort(picked.begin(), picked.end());
  EXPECT_EQ(picked, (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}));

  std::vector<std::string> subset = {"10.0.0.3"};  // host only: any port
  auto only = picker.Pick(In("m", nullptr, &subset));
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(only->endpoints, std::vector<std::string>{"10.0.0.3:8000"});
  std::vector<std::string> none = {"10.9.9.9:1"};
  EXPECT_TRUE(absl::IsUnavailable(picker.Pick(In("m", nullptr, &none)).status()));
  EXPECT_TRUE(absl::IsUnavailable(picker.Pick(In("other")).status()));
}

TEST_F(PickerTest, ShedsPastTheInFlightLimit) {
  PickerConfig config;
  config.max_inflight_per_endpoint = 1;
  Picker picker(config, &index_, &endpoints_);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(picker.Pick(In("m")).ok());
  auto shed = picker.Pick(In("m"));
  EXPECT_TRUE(absl::IsResourceExhausted(shed.status())) << shed.status();
  picker.Release("10.0.0.2:8000");
  auto again = picker.Pick(In("m"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->endpoints, std::vector<std::string>{"10.0.0.2:8000"});
}

TEST_F(PickerTest, SameSeedSameTieBreakAcrossPickers) {
  // No prefix anywhere, nothing in flight: the tie-break alone decides, and
  // two replicas with the same seed agree for the same request.
  PickerConfig config;
  config.seed = 7;
  Picker a(config, &index_, &endpoints_), b(config, &index_, &endpoints_);
  std::vector<uint32_t> other = {9, 9, 9, 9, 9, 9, 9, 9};
  EXPECT_EQ(a.Pick(In("m", &other))->endpoints, b.Pick(In("m", &other))->endpoints);
}

TEST(PickerConfigTest, ParsesAndRejects) {
  auto config = ParsePickerConfig(
      "scorers: {prefix: 3, kv_cache: 0.5, queue: 0, inflight: 2}\n"
      "tiers: {host: 0.9, external: 0.1}\nseed: 42\nfallbacks: 1\nmax_inflight_per_endpoint: 8\n"
      "models: {chat: {model: m, lora: adapter}}\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->prefix_weight, 3);
  EXPECT_EQ(config->inflight_weight, 2);
  EXPECT_DOUBLE_EQ(config->tier_weights[1], 0.9);
  EXPECT_DOUBLE_EQ(config->tier_weights[3], 0.1);
  EXPECT_EQ(config->seed, 42u);
  EXPECT_EQ(config->fallbacks, 1u);
  EXPECT_EQ(config->max_inflight_per_endpoint, 8u);
  EXPECT_EQ(config->aliases.at("chat").lora, "adapter");
  EXPECT_FALSE(ParsePickerConfig("scorers: {latency: 1}").ok());
  EXPECT_FALSE(ParsePickerConfig("tiers: {gpu: 1}").ok());
  EXPECT_FALSE(ParsePickerConfig("weights: 1").ok());
}

}  // namespace
}  // namespace kvindex::epp
