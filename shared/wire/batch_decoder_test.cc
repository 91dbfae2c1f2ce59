#include "shared/wire/batch_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "shared/wire/event_encoder.h"
#include "shared/wire/hash_value.h"
#include "shared/wire/msgpack_writer.h"
#include "shared/wire/testing/wire_test_util.h"

namespace kvindex::wire {
namespace {

using ::testing::ElementsAre;
using testing::GoldenTokens;
using ::testing::HasSubstr;
using testing::kGoldenHash0;
using testing::kGoldenHash1;
using testing::kGoldenTs;
using testing::ReadGolden;

std::vector<uint64_t> Hashes(const EngineEvent& e) {
  return {e.block_hashes.begin(), e.block_hashes.end()};
}
std::vector<uint32_t> Tokens(const EngineEvent& e) {
  return {e.token_ids.begin(), e.token_ids.end()};
}

WireEvent GoldenStored(bool engine_shaped) {
  WireEvent e;
  e.type = EventType::kBlockStored;
  e.block_hashes = {kGoldenHash0, kGoldenHash1};
  e.token_ids = GoldenTokens();
  e.block_size = 16;
  e.medium = "GPU";
  if (engine_shaped) {
    e.extra_keys_nils = 2;
    e.group_idx = 0;
    e.kv_cache_spec_kind = "full_attention";
  }
  return e;
}

void ExpectGoldenStored(const EngineBatch& batch, EventForm form, bool engine_shaped) {
  EXPECT_EQ(batch.ts, kGoldenTs);
  EXPECT_EQ(batch.dp_rank, 0u);
  EXPECT_EQ(batch.envelope_size, 3u);
  ASSERT_EQ(batch.events.size(), 1u);
  const EngineEvent& e = batch.events[0];
  EXPECT_EQ(e.type, EventType::kBlockStored);
  EXPECT_EQ(e.form, form);
  EXPECT_EQ(e.tag, "BlockStored");
  EXPECT_THAT(Hashes(e), ElementsAre(kGoldenHash0, kGoldenHash1));
  EXPECT_EQ(e.parent_block_hash, std::nullopt);
  EXPECT_EQ(Tokens(e), GoldenTokens());
  EXPECT_EQ(e.token_layout, TokenLayout::kFlat);
  EXPECT_EQ(e.block_size, 16u);
  EXPECT_EQ(e.lora_id, std::nullopt);
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_EQ(e.lora_name, std::nullopt);
  EXPECT_EQ(e.cache_salt, std::nullopt);
  EXPECT_EQ(e.locality, std::nullopt);
  EXPECT_EQ(e.kv_cache_spec_sliding_window, std::nullopt);
  EXPECT_EQ(e.unknown_keys, 0u);
  if (engine_shaped) {
    EXPECT_TRUE(e.has_extra_keys);
    EXPECT_EQ(e.extra_keys_non_nil, 0u);
    EXPECT_EQ(e.group_idx, 0);
    EXPECT_EQ(e.kv_cache_spec_kind, "full_attention");
  } else {
    EXPECT_FALSE(e.has_extra_keys);
    EXPECT_EQ(e.group_idx, std::nullopt);
    EXPECT_EQ(e.kv_cache_spec_kind, std::nullopt);
  }
}

struct GoldenStoredCase {
  const char* name;
  EventForm form;
  bool engine_shaped;
  bool map16;
};

class GoldenStoredTest : public ::testing::TestWithParam<GoldenStoredCase> {};

TEST_P(GoldenStoredTest, DecodesToTheDocumentedEvent) {
  const GoldenStoredCase& c = GetParam();
  const std::vector<uint8_t> payload = ReadGolden(c.name);
  ASSERT_FALSE(payload.empty()) << "missing golden vector " << c.name;
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(payload, &batch).ok());
  ExpectGoldenStored(batch, c.form, c.engine_shaped);
}

TEST_P(GoldenStoredTest, EncoderReproducesTheBytes) {
  const GoldenStoredCase& c = GetParam();
  const WireEvent event = GoldenStored(c.engine_shaped);
  std::vector<uint8_t> bytes;
  EncodeBatch(kGoldenTs, {&event, 1}, 0u, {.form = c.form, .map16 = c.map16}, &bytes);
  EXPECT_EQ(bytes, ReadGolden(c.name));
}

INSTANTIATE_TEST_SUITE_P(
    Vectors, GoldenStoredTest,
    ::testing::Values(
        GoldenStoredCase{"A_legacy_array_minimal", EventForm::kArray, false, false},
        GoldenStoredCase{"A2_legacy_array_engine_shaped", EventForm::kArray, true, false},
        GoldenStoredCase{"B_map_minimal", EventForm::kMap, false, false},
        GoldenStoredCase{"B2_map_engine_shaped", EventForm::kMap, true, false},
        GoldenStoredCase{"C_map16_header_engine_shaped", EventForm::kMap, true, true}),
    [](const auto& info) {
      const std::string name = info.param.name;
      return name.substr(0, name.find('_'));
    });

std::vector<WireEvent> RemovedAndCleared() {
  WireEvent removed;
  removed.type = EventType::kBlockRemoved;
  removed.block_hashes = {kGoldenHash0, kGoldenHash1};
  removed.medium = "GPU";
  removed.group_idx = 0;
  WireEvent cleared;
  cleared.type = EventType::kAllBlocksCleared;
  return {removed, cleared};
}

TEST(BatchDecoderTest, GoldenRemovedAndCleared) {
  for (auto [name, form] : {std::pair{"D_map_removed_and_cleared", EventForm::kMap},
                            std::pair{"D2_legacy_array_removed_and_cleared", EventForm::kArray}}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> payload = ReadGolden(name);
    BatchDecoder decoder;
    EngineBatch batch;
    ASSERT_TRUE(decoder.Decode(payload, &batch).ok());
    EXPECT_EQ(batch.ts, kGoldenTs);
    EXPECT_EQ(batch.dp_rank, 0u);
    ASSERT_EQ(batch.events.size(), 2u);
    const EngineEvent& removed = batch.events[0];
    EXPECT_EQ(removed.type, EventType::kBlockRemoved);
    EXPECT_EQ(removed.form, form);
    EXPECT_THAT(Hashes(removed), ElementsAre(kGoldenHash0, kGoldenHash1));
    EXPECT_EQ(removed.medium, "GPU");
    EXPECT_EQ(removed.group_idx, 0);
    EXPECT_EQ(batch.events[1].type, EventType::kAllBlocksCleared);
    EXPECT_EQ(batch.unknown_events, 0u);

    const std::vector<WireEvent> events = RemovedAndCleared();
    std::vector<uint8_t> bytes;
    EncodeBatch(kGoldenTs, events, 0u, {.form = form}, &bytes);
    EXPECT_EQ(bytes, payload);
  }
}

TEST(BatchDecoderTest, GoldenEmptyHeartbeat) {
  const std::vector<uint8_t> payload = ReadGolden("E_map_empty_heartbeat_batch");
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(payload, &batch).ok());
  EXPECT_EQ(batch.ts, kGoldenTs);
  EXPECT_EQ(batch.dp_rank, 0u);
  EXPECT_TRUE(batch.events.empty());
}

// Decodes `events` encoded with `options`; fails the test on error.
EngineBatch DecodeOk(BatchDecoder& decoder, std::vector<uint8_t>& bytes,
                     std::span<const WireEvent> events, const EncodeOptions& options,
                     std::optional<uint32_t> rank = 0u) {
  bytes.clear();
  EncodeBatch(12.5, events, rank, options, &bytes);
  EngineBatch batch;
  const Status status = decoder.Decode(bytes, &batch);
  EXPECT_TRUE(status.ok()) << status;
  return batch;
}

TEST(BatchDecoderTest, EveryHashEncodingNormalizesToTheSameBits) {
  const std::vector<uint64_t> hashes = {0,
                                        1,
                                        127,
                                        128,
                                        0xffff,
                                        0x1'0000'0000ull,
                                        0x8000000000000000ull,
                                        0xffffffffffffffffull,
                                        kGoldenHash0};
  for (HashEncoding enc :
       {HashEncoding::kUint, HashEncoding::kSigned, HashEncoding::kBin32, HashEncoding::kStr32}) {
    for (EventForm form : {EventForm::kMap, EventForm::kArray}) {
      WireEvent e = GoldenStored(false);
      e.block_hashes = hashes;
      e.parent_block_hash = 0xfedcba9876543210ull;
      BatchDecoder decoder;
      std::vector<uint8_t> bytes;
      const EngineBatch batch = DecodeOk(decoder, bytes, {&e, 1}, {.form = form, .hashes = enc});
      ASSERT_EQ(batch.events.size(), 1u);
      EXPECT_EQ(Hashes(batch.events[0]), hashes) << static_cast<int>(enc);
      EXPECT_EQ(batch.events[0].parent_block_hash, 0xfedcba9876543210ull);
    }
  }
}

TEST(BatchDecoderTest, NegativeAndShortHashes) {
  EXPECT_EQ(HashFromSigned(-1), 0xffffffffffffffffull);
  EXPECT_EQ(HashFromSigned(-2), 0xfffffffffffffffeull);
  const uint8_t four[] = {0x01, 0x02, 0x03, 0x04};
  EXPECT_EQ(HashFromBytes(four, 4), 0x01020304u);
  EXPECT_EQ(HashFromBytes(four, 0), 0u);
  const uint8_t ten[] = {0xaa, 0xbb, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(HashFromBytes(ten, 10), 0x0102030405060708ull);

  // SGLang: small negative ints as negative fixint / int8 / int16.
  std::vector<uint8_t> bytes;
  MsgpackWriter w(&bytes);
  w.ArrayHeader(3);
  w.Float64(1);
  w.ArrayHeader(1);
  w.MapHeader(2);
  w.Str("type");
  w.Str("BlockRemoved");
  w.Str("block_hashes");
  w.ArrayHeader(4);
  w.Int(-1);
  w.Int(-100);
  w.Int(-1000);
  w.Int64Fixed(5);
  w.Nil();
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(bytes, &batch).ok());
  EXPECT_THAT(Hashes(batch.events[0]),
              ElementsAre(HashFromSigned(-1), HashFromSigned(-100), HashFromSigned(-1000), 5u));
  EXPECT_EQ(batch.dp_rank, std::nullopt);
}

TEST(BatchDecoderTest, TwoElementEnvelopeAndRanks) {
  const WireEvent e = GoldenStored(false);
  BatchDecoder decoder;
  std::vector<uint8_t> bytes;
  EngineBatch batch = DecodeOk(decoder, bytes, {&e, 1}, {.two_element = true});
  EXPECT_EQ(batch.envelope_size, 2u);
  EXPECT_EQ(batch.dp_rank, std::nullopt);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_THAT(Hashes(batch.events[0]), ElementsAre(kGoldenHash0, kGoldenHash1));

  batch = DecodeOk(decoder, bytes, {&e, 1}, {}, 7u);
  EXPECT_EQ(batch.dp_rank, 7u);
  batch = DecodeOk(decoder, bytes, {&e, 1}, {}, std::nullopt);
  EXPECT_EQ(batch.dp_rank, std::nullopt);
}

TEST(BatchDecoderTest, IntegerTimestampAndExtraEnvelopeElementsAccepted) {
  std::vector<uint8_t> bytes;
  MsgpackWriter w(&bytes);
  w.ArrayHeader(4);
  w.Uint(1757500000);
  w.ArrayHeader(0);
  w.Uint(2);
  w.Str("future");
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(bytes, &batch).ok());
  EXPECT_EQ(batch.ts, 1757500000.0);
  EXPECT_EQ(batch.dp_rank, 2u);
}

TEST(BatchDecoderTest, TypeKeyNeedNotComeFirst) {
  std::vector<uint8_t> bytes;
  MsgpackWriter w(&bytes);
  w.ArrayHeader(3);
  w.Float64(1);
  w.ArrayHeader(1);
  w.MapHeader(3);
  w.Str("block_hashes");
  w.ArrayHeader(1);
  w.Uint(42);
  w.Str("medium");
  w.Str("CPU");
  w.Str("type");
  w.Str("BlockRemoved");
  w.Uint(0);
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(bytes, &batch).ok());
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(batch.events[0].type, EventType::kBlockRemoved);
  EXPECT_THAT(Hashes(batch.events[0]), ElementsAre(42u));
  EXPECT_EQ(batch.events[0].medium, "CPU");
}

TEST(BatchDecoderTest, UnknownTagsAndKeysAreSkippedAndCounted) {
  WireEvent unknown;
  unknown.type = EventType::kUnknown;
  unknown.tag = "BlockInactive";
  WireEvent stored = GoldenStored(false);
  stored.unknown_keys = {"new_field", "another"};
  WireEvent removed = RemovedAndCleared()[0];
  removed.unknown_keys = {"x"};
  const std::vector<WireEvent> events = {unknown, stored, removed};
  for (EventForm form : {EventForm::kMap, EventForm::kArray}) {
    BatchDecoder decoder;
    std::vector<uint8_t> bytes;
    const EngineBatch batch = DecodeOk(decoder, bytes, events, {.form = form});
    ASSERT_EQ(batch.events.size(), 3u);
    EXPECT_EQ(batch.events[0].type, EventType::kUnknown);
    EXPECT_EQ(batch.events[0].tag, "BlockInactive");
    EXPECT_EQ(batch.events[1].type, EventType::kBlockStored);
    EXPECT_EQ(Tokens(batch.events[1]), GoldenTokens());
    EXPECT_EQ(batch.events[2].type, EventType::kBlockRemoved);
    EXPECT_EQ(batch.unknown_events, 1u);
    EXPECT_EQ(batch.unknown_keys, form == EventForm::kMap ? 3u : 0u);
  }
}

TEST(BatchDecoderTest, StoredOnlyKeysInARemovedEventAreUnknownKeys) {
  std::vector<uint8_t> bytes;
  MsgpackWriter w(&bytes);
  w.ArrayHeader(3);
  w.Float64(1);
  w.ArrayHeader(1);
  w.MapHeader(4);
  w.Str("type");
  w.Str("BlockRemoved");
  w.Str("block_hashes");
  w.ArrayHeader(0);
  w.Str("token_ids");
  w.Str("not even an array");  // ignored: not a BlockRemoved field
  w.Uint(5);                   // non-string key
  w.Uint(6);
  w.Nil();
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(bytes, &batch).ok());
  EXPECT_EQ(batch.events[0].unknown_keys, 2u);
}

TEST(BatchDecoderTest, MapEventWithoutTypeIsUnknown) {
  std::vector<uint8_t> bytes;
  MsgpackWriter w(&bytes);
  w.ArrayHeader(3);
  w.Float64(1);
  w.ArrayHeader(1);
  w.MapHeader(1);
  w.Str("block_hashes");
  w.ArrayHeader(0);
  w.Nil();
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(bytes, &batch).ok());
  EXPECT_EQ(batch.events[0].type, EventType::kUnknown);
  EXPECT_EQ(batch.unknown_events, 1u);
}

TEST(BatchDecoderTest, AllStoredFieldsDecode) {
  WireEvent e = GoldenStored(true);
  e.parent_block_hash = 99;
  e.lora_name = "my-lora";
  e.cache_salt = "salt";
  e.locality = "LOCAL";
  e.ownership = "tier-2";
  e.session_id = "s1";
  e.kv_cache_spec_sliding_window = 4096;
  e.group_idx = -3;
  BatchDecoder decoder;
  std::vector<uint8_t> bytes;
  const EngineBatch batch = DecodeOk(decoder, bytes, {&e, 1}, {.map16 = true});
  const EngineEvent& d = batch.events[0];
  EXPECT_EQ(d.parent_block_hash, 99u);
  EXPECT_EQ(d.lora_name, "my-lora");
  EXPECT_EQ(d.cache_salt, "salt");
  EXPECT_EQ(d.locality, "LOCAL");
  EXPECT_EQ(d.ownership, "tier-2");
  EXPECT_EQ(d.session_id, "s1");
  EXPECT_EQ(d.kv_cache_spec_sliding_window, 4096);
  EXPECT_EQ(d.group_idx, -3);
  EXPECT_EQ(d.kv_cache_spec_kind, "full_attention");
}

TEST(BatchDecoderTest, ShortLegacyArraysAndIgnoredTrailingPositions) {
  WireEvent e = GoldenStored(true);
  BatchDecoder decoder;
  std::vector<uint8_t> bytes;
  // Older engines: only block_hashes .. block_size.
  EngineBatch batch =
      DecodeOk(decoder, bytes, {&e, 1}, {.form = EventForm::kArray, .array_fields = 4});
  EXPECT_EQ(batch.events[0].block_size, 16u);
  EXPECT_EQ(batch.events[0].medium, std::nullopt);
  EXPECT_EQ(batch.events[0].group_idx, std::nullopt);

  // Positions after kv_cache_spec_sliding_window are ignored, whatever they hold.
  bytes.clear();
  MsgpackWriter w(&bytes);
  w.ArrayHeader(3);
  w.Float64(1);
  w.ArrayHeader(1);
  w.ArrayHeader(15);
  w.Str("BlockStored");
  w.ArrayHeader(1);
  w.Uint(1);
  w.Nil();
  w.ArrayHeader(0);
  w.Uint(0);
  for (int k = 0; k < 7; ++k) w.Nil();
  w.Str("REMOTE");  // a would-be locality: ignored in array form
  w.MapHeader(1);
  w.Uint(1);
  w.Uint(2);
  w.Bool(true);
  w.Uint(0);
  ASSERT_TRUE(decoder.Decode(bytes, &batch).ok());
  EXPECT_EQ(batch.events[0].locality, std::nullopt);
}

TEST(BatchDecoderTest, ExtraKeysTuplesAreCountedNotParsed) {
  std::vector<uint8_t> bytes;
  MsgpackWriter w(&bytes);
  w.ArrayHeader(3);
  w.Float64(1);
  w.ArrayHeader(1);
  w.MapHeader(4);
  w.Str("type");
  w.Str("BlockStored");
  w.Str("block_hashes");
  w.ArrayHeader(0);
  w.Str("extra_keys");
  w.ArrayHeader(3);
  w.ArrayHeader(2);  // ("mm-hash", 0)
  w.Str("mm-hash");
  w.Uint(0);
  w.Nil();
  w.ArrayHeader(1);
  w.MapHeader(1);  // nested content stays opaque
  w.Str("k");
  w.Float64(2);
  w.Str("lora_id");
  w.Int(-3);
  w.Uint(0);
  BatchDecoder decoder;
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(bytes, &batch).ok());
  EXPECT_TRUE(batch.events[0].has_extra_keys);
  EXPECT_EQ(batch.events[0].extra_keys_non_nil, 2u);
  EXPECT_EQ(batch.events[0].lora_id, -3);
}

TEST(BatchDecoderTest, MissingBlockSizeIsZero) {
  WireEvent e = GoldenStored(false);
  e.omit_block_size = true;
  BatchDecoder decoder;
  std::vector<uint8_t> bytes;
  const EngineBatch batch = DecodeOk(decoder, bytes, {&e, 1}, {});
  EXPECT_EQ(batch.events[0].block_size, 0u);
}

TEST(BatchDecoderTest, EagleBigramsFlattenToFirstsPlusLastSecond) {
  WireEvent e = GoldenStored(false);
  e.token_ids.clear();
  for (uint32_t t = 1000; t < 1033; ++t) e.token_ids.push_back(t);  // 33 tokens = 32 pairs
  e.bigram = true;
  BatchDecoder decoder;
  std::vector<uint8_t> bytes;
  const EngineBatch batch = DecodeOk(decoder, bytes, {&e, 1}, {});
  EXPECT_EQ(batch.events[0].token_layout, TokenLayout::kBigram);
  EXPECT_EQ(Tokens(batch.events[0]), e.token_ids);
}

TEST(BatchDecoderTest, LargeTokenIdsUseEveryUintWidth) {
  WireEvent e = GoldenStored(false);
  e.token_ids = {0, 127, 128, 255, 256, 65535, 65536, 151935, 0xffffffffu};
  BatchDecoder decoder;
  std::vector<uint8_t> bytes;
  const EngineBatch batch = DecodeOk(decoder, bytes, {&e, 1}, {});
  EXPECT_EQ(Tokens(batch.events[0]), e.token_ids);
}

TEST(BatchDecoderTest, ScratchIsReusedAcrossBatches) {
  WireEvent big = GoldenStored(false);
  BatchDecoder decoder;
  std::vector<uint8_t> a, b;
  const std::vector<WireEvent> two = {big, big};
  EncodeBatch(1, two, 0u, {}, &a);
  WireEvent small = RemovedAndCleared()[0];
  EncodeBatch(2, {&small, 1}, 1u, {}, &b);
  EngineBatch batch;
  ASSERT_TRUE(decoder.Decode(a, &batch).ok());
  EXPECT_EQ(batch.events.size(), 2u);
  ASSERT_TRUE(decoder.Decode(b, &batch).ok());
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(batch.events[0].type, EventType::kBlockRemoved);
  EXPECT_EQ(batch.dp_rank, 1u);
}

// ---- malformed payloads -------------------------------------------------

struct BadCase {
  const char* name;
  std::vector<uint8_t> bytes;
  size_t offset;
  const char* message;
};

std::vector<uint8_t> Build(const std::function<void(MsgpackWriter&)>& body) {
  std::vector<uint8_t> bytes;
  MsgpackWriter w(&bytes);
  body(w);
  return bytes;
}

// [1.0, [<event>], 0] where the event is written by `event`. The event
// starts at byte 11.
std::vector<uint8_t> OneEvent(const std::function<void(MsgpackWriter&)>& event) {
  return Build([&](MsgpackWriter& w) {
    w.ArrayHeader(3);
    w.Float64(1);
    w.ArrayHeader(1);
    event(w);
    w.Uint(0);
  });
}

TEST(BatchDecoderTest, WrongTypesFailTheWholePayloadWithAnOffset) {
  const std::vector<BadCase> cases = {
      {"empty", {}, 0, "truncated"},
      {"not an array", Build([](MsgpackWriter& w) { w.MapHeader(0); }), 0, "must be an array"},
      {"one element", Build([](MsgpackWriter& w) {
         w.ArrayHeader(1);
         w.Float64(1);
       }),
       0, "1 elements"},
      {"ts string", Build([](MsgpackWriter& w) {
         w.ArrayHeader(3);
         w.Str("x");
         w.ArrayHeader(0);
         w.Nil();
       }),
       1, "ts must be a number"},
      {"events map", Build([](MsgpackWriter& w) {
         w.ArrayHeader(3);
         w.Float64(1);
         w.MapHeader(0);
         w.Nil();
       }),
       10, "events must be an array"},
      {"negative rank", Build([](MsgpackWriter& w) {
         w.ArrayHeader(3);
         w.Float64(1);
         w.ArrayHeader(0);
         w.Int(-1);
       }),
       11, "dp_rank"},
      {"trailing", Build([](MsgpackWriter& w) {
         w.ArrayHeader(3);
         w.Float64(1);
         w.ArrayHeader(0);
         w.Nil();
         w.Nil();
       }),
       12, "trailing"},
      {"event is int", OneEvent([](MsgpackWriter& w) { w.Uint(3); }), 11, "map or an array"},
      {"hashes str", OneEvent([](MsgpackWriter& w) {
         w.MapHeader(2);
         w.Str("type");
         w.Str("BlockRemoved");
         w.Str("block_hashes");
         w.Str("oops");
       }),
       11 + 1 + 5 + 13 + 13, "block_hashes must be an array"},
      {"hash float", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(2);
         w.Str("BlockRemoved");
         w.ArrayHeader(1);
         w.Float64(1.5);
       }),
       11 + 1 + 13 + 1, "hash"},
      {"missing hashes map", OneEvent([](MsgpackWriter& w) {
         w.MapHeader(1);
         w.Str("type");
         w.Str("BlockStored");
       }),
       11, "without block_hashes"},
      {"missing hashes array", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(1);
         w.Str("BlockRemoved");
       }),
       11, "without block_hashes"},
      {"token string", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(4);
         w.Str("BlockStored");
         w.ArrayHeader(0);
         w.Nil();
         w.ArrayHeader(2);
         w.Uint(1);
         w.Str("x");
       }),
       11 + 1 + 12 + 1 + 1 + 1 + 1, "token_ids entries must be uint32"},
      {"token negative", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(4);
         w.Str("BlockStored");
         w.ArrayHeader(0);
         w.Nil();
         w.ArrayHeader(1);
         w.Int(-5);
       }),
       11 + 1 + 12 + 1 + 1 + 1, "token_ids entries must be uint32"},
      {"bad bigram", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(4);
         w.Str("BlockStored");
         w.ArrayHeader(0);
         w.Nil();
         w.ArrayHeader(1);
         w.ArrayHeader(3);
         w.Uint(1);
         w.Uint(2);
         w.Uint(3);
       }),
       11 + 1 + 12 + 1 + 1 + 1, "bigram"},
      {"medium int", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(3);
         w.Str("BlockRemoved");
         w.ArrayHeader(0);
         w.Uint(1);
       }),
       11 + 1 + 13 + 1, "medium must be a str or nil"},
      {"group str", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(4);
         w.Str("BlockRemoved");
         w.ArrayHeader(0);
         w.Nil();
         w.Str("0");
       }),
       11 + 1 + 13 + 1 + 1, "group_idx must be an int or nil"},
      {"block size negative", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(5);
         w.Str("BlockStored");
         w.ArrayHeader(0);
         w.Nil();
         w.ArrayHeader(0);
         w.Int(-16);
       }),
       11 + 1 + 12 + 1 + 1 + 1, "block_size"},
      {"lora_id str", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(6);
         w.Str("BlockStored");
         w.ArrayHeader(0);
         w.Nil();
         w.ArrayHeader(0);
         w.Uint(0);
         w.Str("1");
       }),
       11 + 1 + 12 + 1 + 1 + 1 + 1, "lora_id must be an int or nil"},
      {"extra_keys entry int", OneEvent([](MsgpackWriter& w) {
         w.MapHeader(3);
         w.Str("type");
         w.Str("BlockStored");
         w.Str("block_hashes");
         w.ArrayHeader(0);
         w.Str("extra_keys");
         w.ArrayHeader(2);
         w.Nil();
         w.Uint(7);
       }),
       11 + 1 + 5 + 12 + 13 + 1 + 11 + 1 + 1, "extra_keys must be a list of arrays or nils"},
      {"tag int", OneEvent([](MsgpackWriter& w) {
         w.ArrayHeader(1);
         w.Uint(1);
       }),
       12, "type must be a str"},
      {"map tag int", OneEvent([](MsgpackWriter& w) {
         w.MapHeader(1);
         w.Str("type");
         w.Uint(1);
       }),
       17, "type must be a str"},
      {"empty event array", OneEvent([](MsgpackWriter& w) { w.ArrayHeader(0); }), 12, "empty"},
      {"reserved byte", Build([](MsgpackWriter& w) {
         w.ArrayHeader(3);
         w.Float64(1);
         w.ArrayHeader(1);
         w.Raw(std::vector<uint8_t>{0xc1});
         w.Nil();
       }),
       12, "malformed"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    BatchDecoder decoder;
    EngineBatch batch;
    const Status status = decoder.Decode(c.bytes, &batch);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
    EXPECT_EQ(decoder.error_offset(), c.offset) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("byte " + std::to_string(c.offset)));
    EXPECT_TRUE(batch.events.empty());
  }
}

TEST(BatchDecoderTest, EveryTruncationOfEveryGoldenVectorFailsCleanly) {
  for (const char* name :
       {"A_legacy_array_minimal", "A2_legacy_array_engine_shaped", "B_map_minimal",
        "B2_map_engine_shaped", "C_map16_header_engine_shaped", "D_map_removed_and_cleared",
        "D2_legacy_array_removed_and_cleared", "E_map_empty_heartbeat_batch"}) {
    const std::vector<uint8_t> payload = ReadGolden(name);
    ASSERT_FALSE(payload.empty()) << name;
    BatchDecoder decoder;
    EngineBatch batch;
    for (size_t n = 0; n < payload.size(); ++n) {
      const Status status = decoder.Decode({payload.data(), n}, &batch);
      EXPECT_FALSE(status.ok()) << name << " truncated to " << n;
      EXPECT_LE(decoder.error_offset(), n);
    }
    EXPECT_TRUE(decoder.Decode(payload, &batch).ok()) << name;
  }
}

TEST(BatchDecoderTest, HostileCountsFailFast) {
  // array32 claiming 4 billion events in a 20-byte payload.
  const std::vector<uint8_t> bytes = {0x93, 0xcb, 0,    0,    0,    0,    0,    0,
                                      0,    0,    0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0};
  BatchDecoder decoder;
  EngineBatch batch;
  EXPECT_FALSE(decoder.Decode(bytes, &batch).ok());
}

}  // namespace
}  // namespace kvindex::wire
