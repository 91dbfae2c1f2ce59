// The hash-scheme mappings of the compatibility APIs, with vectors, and the
// proof that our canonical hashes are Dynamo's (so /query_tiered_by_hash
// needs no translation): Dynamo's scheme is restated here from its source's
// facts (lib/kv-router: XXH3_SEED = 1337; LocalBlockHash = XXH3-64 of the
// block's tokens as little-endian u32 with that seed; sequence hash[0] =
// local[0], hash[i] = XXH3-64(le_u64(hash[i-1]) || le_u64(local[i]), 1337))
// with the xxHash library directly, and compared with shared/hashing.
#include "shared/query/compat_hashes.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "shared/hashing/canonical_hash.h"

namespace kvindex::query::compat {
namespace {

constexpr uint64_t kDynamoSeed = 1337;  // Dynamo's XXH3_SEED

std::vector<uint64_t> DynamoLocalHashes(const std::vector<uint32_t>& tokens, size_t block_size) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i + block_size <= tokens.size(); i += block_size) {
    std::vector<uint8_t> bytes;
    for (size_t k = i; k < i + block_size; ++k) {
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<uint8_t>(tokens[k] >> (8 * b)));
    }
    out.push_back(XXH3_64bits_withSeed(bytes.data(), bytes.size(), kDynamoSeed));
  }
  return out;
}

std::vector<uint64_t> DynamoSequenceHashes(const std::vector<uint64_t>& local) {
  std::vector<uint64_t> out;
  for (uint64_t h : local) {
    if (out.empty()) {
      out.push_back(h);
      continue;
    }
    uint8_t bytes[16];
    for (int b = 0; b < 8; ++b) {
      bytes[b] = static_cast<uint8_t>(out.back() >> (8 * b));
      bytes[8 + b] = static_cast<uint8_t>(h >> (8 * b));
    }
    out.push_back(XXH3_64bits_withSeed(bytes, sizeof(bytes), kDynamoSeed));
  }
  return out;
}

TEST(CompatHashesTest, OurCanonicalHashesAreDynamos) {
  std::mt19937_64 rng(7);
  for (size_t block_size : {1u, 4u, 16u, 64u}) {
    for (int round = 0; round < 20; ++round) {
      std::vector<uint32_t> tokens(rng() % 600);
      for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng());
      std::vector<uint64_t> local, seq;
      hashing::ComputeLocalHashes(tokens, static_cast<uint32_t>(block_size),
                                  hashing::LocalHashSeed("", ""), &local);
      hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
      const std::vector<uint64_t> dynamo_local = DynamoLocalHashes(tokens, block_size);
      EXPECT_EQ(local, dynamo_local);
      EXPECT_EQ(seq, DynamoSequenceHashes(dynamo_local));
    }
  }
}

// Dynamo sends LocalBlockHash as i64 (`hash.0 as i64`): the same bits.
TEST(CompatHashesTest, DynamoI64Vectors) {
  // local([1,2,3,4]) (semantics.md section 2) = 14643705804678351452 = i64 -3803038269031200164.
  EXPECT_EQ(FromDynamoI64(-3803038269031200164LL), 14643705804678351452ull);
  EXPECT_EQ(ToDynamoI64(14643705804678351452ull), -3803038269031200164LL);
  EXPECT_EQ(FromDynamoI64(-1), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(FromDynamoI64(std::numeric_limits<int64_t>::min()), uint64_t{1} << 63);
  EXPECT_EQ(FromDynamoI64(42), 42u);
  for (uint64_t v : {0ull, 1ull, 16777012769546811212ull, ~0ull}) {
    EXPECT_EQ(FromDynamoI64(ToDynamoI64(v)), v);
  }
}

// Mooncake RFC #1403 rolling hashes with S = 1337 are our sequence hashes:
// seq[1] of tokens 1..8 in blocks of 4 (semantics.md section 2).
TEST(CompatHashesTest, MooncakeSeedVectors) {
  std::vector<uint64_t> local = DynamoLocalHashes({1, 2, 3, 4, 5, 6, 7, 8}, 4);
  EXPECT_EQ(DynamoSequenceHashes(local)[1], 4945711292740353085ull);
  EXPECT_TRUE(CheckMooncakeSeed(1337).ok());
  Status other = CheckMooncakeSeed(0);
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.message().find("1337"), std::string_view::npos);
}

// SGLang: decimal signed i64 strings; a u64 spelling above i64::MAX is the
// same block (their normalize_hash).
TEST(CompatHashesTest, SglangStringVectors) {
  EXPECT_EQ(*ParseSglangHash("-3803038269031200164"), 14643705804678351452ull);
  EXPECT_EQ(*ParseSglangHash("14643705804678351452"), 14643705804678351452ull);
  EXPECT_EQ(*ParseSglangHash("0"), 0u);
  EXPECT_EQ(*ParseSglangHash("-1"), ~0ull);
  EXPECT_EQ(*ParseSglangHash("18446744073709551615"), ~0ull);
  EXPECT_EQ(*ParseSglangHash("-9223372036854775808"), uint64_t{1} << 63);
  EXPECT_EQ(SglangHashString(14643705804678351452ull), "-3803038269031200164");
  EXPECT_EQ(SglangHashString(~0ull), "-1");
  EXPECT_EQ(SglangHashString(42), "42");
  for (const char* bad : {"", "abc", "1.5", "18446744073709551616", "-9223372036854775809", " 1",
                          "1 ", "0x10", "+-1"}) {
    EXPECT_FALSE(ParseSglangHash(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace kvindex::query::compat
