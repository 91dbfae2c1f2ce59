#include "shared/hashing/canonical_hash.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvindex::hashing {
namespace {

// Vectors from docs/semantics.md section 2 (block size 4).
TEST(CanonicalHashTest, PinnedSeeds) {
  EXPECT_EQ(kRootSeed, 1337u);
  EXPECT_EQ(LocalHashSeed("", ""), 1337u);
  EXPECT_EQ(LocalHashSeed("my-lora", ""), 12827409268353072861ull);
}

TEST(CanonicalHashTest, LocalHashVectors) {
  const std::vector<uint32_t> a = {1, 2, 3, 4};
  const std::vector<uint32_t> b = {5, 6, 7, 8};
  EXPECT_EQ(LocalBlockHash(a, kRootSeed), 14643705804678351452ull);
  EXPECT_EQ(LocalBlockHash(b, kRootSeed), 16777012769546811212ull);
  EXPECT_EQ(LocalBlockHash(a, LocalHashSeed("my-lora", "")), 15671544057904749233ull);
}

TEST(CanonicalHashTest, SequenceHashVector) {
  const std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // 9 = partial tail, ignored
  std::vector<uint64_t> local, seq;
  ComputeLocalHashes(tokens, 4, kRootSeed, &local);
  ASSERT_EQ(local.size(), 2u);
  ComputeSequenceHashes(local, std::nullopt, &seq);
  ASSERT_EQ(seq.size(), 2u);
  EXPECT_EQ(seq[0], 14643705804678351452ull);
  EXPECT_EQ(seq[1], 4945711292740353085ull);
  EXPECT_EQ(ChainHash(seq[0], local[1]), seq[1]);
}

TEST(CanonicalHashTest, ChainingFromParentEqualsChainingWhole) {
  std::vector<uint32_t> tokens(64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 + 3);
  std::vector<uint64_t> local, whole, tail;
  ComputeLocalHashes(tokens, 16, kRootSeed, &local);
  ComputeSequenceHashes(local, std::nullopt, &whole);
  ComputeSequenceHashes(std::span<const uint64_t>(local).subspan(2), whole[1], &tail);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0], whole[2]);
  EXPECT_EQ(tail[1], whole[3]);
}

TEST(CanonicalHashTest, SaltChangesSeedAndLoraAndSaltCompose) {
  const uint64_t salt_only = LocalHashSeed("", "tenant-a");
  EXPECT_NE(salt_only, kRootSeed);
  EXPECT_EQ(LocalHashSeed("my-lora", "tenant-a"),
            LocalHashSeed("my-lora", "") + (salt_only - kRootSeed));
}

TEST(CanonicalHashTest, EagleWindowsOverlapByOneToken) {
  // Bigrams (1,2),(2,3),...,(8,9) flatten to 1..9: two windows of 5 with stride 4.
  const std::vector<uint32_t> flat = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<uint64_t> local;
  ComputeEagleLocalHashes(flat, 4, kRootSeed, &local);
  ASSERT_EQ(local.size(), 2u);
  const std::vector<uint32_t> w0 = {1, 2, 3, 4, 5};
  const std::vector<uint32_t> w1 = {5, 6, 7, 8, 9};
  EXPECT_EQ(local[0], LocalBlockHash(w0, kRootSeed));
  EXPECT_EQ(local[1], LocalBlockHash(w1, kRootSeed));
}

TEST(CanonicalHashTest, EmptyAndZeroBlockSize) {
  std::vector<uint64_t> local = {42};
  ComputeLocalHashes({}, 16, kRootSeed, &local);
  EXPECT_TRUE(local.empty());
  const std::vector<uint32_t> t = {1, 2};
  ComputeLocalHashes(t, 0, kRootSeed, &local);
  EXPECT_TRUE(local.empty());
  ComputeEagleLocalHashes({}, 4, kRootSeed, &local);
  EXPECT_TRUE(local.empty());
}

}  // namespace
}  // namespace kvindex::hashing
