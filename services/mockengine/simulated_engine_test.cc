#include "services/mockengine/simulated_engine.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <numeric>

#include "services/mockengine/prompt_tokens.h"
#include "services/mockengine/wire_encoder.h"

namespace kvindex::mockengine {
namespace {

std::vector<uint32_t> Tokens(size_t n, uint32_t start = 1) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(SimulatedEngineTest, StoresOnlyNewFullBlocksWithParent) {
  SimulatedEngine engine({.block_size = 4, .device_capacity_blocks = 100});
  std::vector<MockEvent> events;
  engine.ServePrompt(Tokens(10), &events);  // 2 full blocks, tail ignored
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, MockEvent::Type::kStored);
  EXPECT_EQ(events[0].block_hashes.size(), 2u);
  EXPECT_FALSE(events[0].parent_hash.has_value());
  EXPECT_EQ(events[0].token_ids, Tokens(8));
  const uint64_t second = events[0].block_hashes[1];

  events.clear();
  engine.ServePrompt(Tokens(12), &events);  // prefix reused, one new block
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].block_hashes.size(), 1u);
  EXPECT_EQ(events[0].parent_hash, second);
  EXPECT_EQ(events[0].token_ids, Tokens(4, 9));

  events.clear();
  engine.ServePrompt(Tokens(12), &events);  // fully cached: nothing to say
  EXPECT_TRUE(events.empty());
}

TEST(SimulatedEngineTest, EvictionOffloadsBeforeDeviceRemoval) {
  SimulatedEngine engine({.block_size = 4, .device_capacity_blocks = 2, .host_capacity_blocks = 1});
  std::vector<MockEvent> events;
  engine.ServePrompt(Tokens(8), &events);
  events.clear();
  engine.ServePrompt(Tokens(8, 100), &events);  // needs both slots
  // Both device blocks are offloaded; the host holds one, so the first is
  // evicted from the host again within the same batch.
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, MockEvent::Type::kStored);  // offload placeholders
  EXPECT_EQ(events[0].medium, "CPU");
  EXPECT_EQ(events[0].block_size, 0u);
  EXPECT_TRUE(events[0].token_ids.empty());
  EXPECT_EQ(events[0].block_hashes.size(), 2u);
  EXPECT_EQ(events[1].type, MockEvent::Type::kRemoved);
  EXPECT_EQ(events[1].medium, "CPU");
  EXPECT_EQ(events[1].block_hashes.size(), 1u);
  EXPECT_EQ(events[2].type, MockEvent::Type::kRemoved);
  EXPECT_EQ(events[2].medium, "GPU");
  EXPECT_EQ(events[2].block_hashes.size(), 2u);
  EXPECT_EQ(events[3].type, MockEvent::Type::kStored);
  EXPECT_EQ(events[3].medium, "GPU");
  EXPECT_EQ(engine.device_blocks(), 2u);
  EXPECT_EQ(engine.host_blocks(), 1u);
}

TEST(SimulatedEngineTest, EngineHashesDifferAcrossWorkers) {
  SimulatedEngine a({.block_size = 4, .hash_seed = 1});
  SimulatedEngine b({.block_size = 4, .hash_seed = 2});
  std::vector<MockEvent> ea, eb;
  a.ServePrompt(Tokens(4), &ea);
  b.ServePrompt(Tokens(4), &eb);
  EXPECT_NE(ea[0].block_hashes, eb[0].block_hashes);
}

TEST(WireEncoderTest, VllmMapBatchShape) {
  MockEvent stored;
  stored.block_hashes = {0xDAB89BAA7B5857C0ull};
  stored.token_ids = Tokens(16, 100);
  stored.block_size = 16;
  stored.medium = "GPU";
  const std::string bytes = EncodeBatch(WireForm::kVllmMap, 1757500000.25, {&stored, 1}, 0);
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& root = handle.get();
  ASSERT_EQ(root.type, msgpack::type::ARRAY);
  ASSERT_EQ(root.via.array.size, 3u);
  EXPECT_DOUBLE_EQ(root.via.array.ptr[0].as<double>(), 1757500000.25);
  const msgpack::object& event = root.via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(event.type, msgpack::type::MAP);
  EXPECT_EQ(event.via.map.ptr[0].val.as<std::string>(), "BlockStored");
  EXPECT_EQ(event.via.map.ptr[1].val.via.array.ptr[0].as<uint64_t>(), 0xDAB89BAA7B5857C0ull);
}

TEST(WireEncoderTest, SglangHashesAreSigned) {
  MockEvent removed;
  removed.type = MockEvent::Type::kRemoved;
  removed.block_hashes = {0xDAB89BAA7B5857C0ull};
  removed.medium = "GPU";
  const std::string bytes = EncodeBatch(WireForm::kSglangMap, 1.0, {&removed, 1}, 0);
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& hash =
      handle.get().via.array.ptr[1].via.array.ptr[0].via.map.ptr[1].val.via.array.ptr[0];
  EXPECT_EQ(hash.type, msgpack::type::NEGATIVE_INTEGER);
  EXPECT_EQ(static_cast<uint64_t>(hash.as<int64_t>()), 0xDAB89BAA7B5857C0ull);
}

TEST(PromptTokensTest, EqualIdsGiveEqualTokensAndInputLengthCuts) {
  TraceRequest a{.input_length = 0, .hash_ids = {0, 1}};
  TraceRequest b{.input_length = 700, .hash_ids = {0, 2}};
  const auto ta = PromptTokens(a);
  const auto tb = PromptTokens(b);
  ASSERT_EQ(ta.size(), 1024u);
  ASSERT_EQ(tb.size(), 700u);
  EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 512, tb.begin()));
  EXPECT_FALSE(std::equal(ta.begin() + 512, ta.begin() + 700, tb.begin() + 512));
}

}  // namespace
}  // namespace kvindex::mockengine
