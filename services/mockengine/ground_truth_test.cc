#include "services/mockengine/ground_truth.h"

#include <gtest/gtest.h>

#include <numeric>

#include "services/mockengine/test_tokens.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/index/index_interface.h"
#include "shared/index/reference_index.h"

namespace kvindex::mockengine {
namespace {

using testing::Tokens;

std::vector<uint64_t> Seq(std::span<const uint32_t> tokens, uint32_t bs = 4) {
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(tokens, bs, hashing::LocalHashSeed("", ""), &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  return seq;
}

struct Fixture {
  SimulatedEngine a{
      {.block_size = 4, .device_capacity_blocks = 3, .host_capacity_blocks = 4, .hash_seed = 1}};
  SimulatedEngine b{{.block_size = 4, .device_capacity_blocks = 8, .hash_seed = 2}};
  AgentView va, vb;
  std::vector<TruthSource> Sources() const {
    return {{"m", {"w0", 0}, 4, &a, &va, false}, {"m", {"w1", 1}, 4, &b, &vb, false}};
  }
  void Serve(SimulatedEngine& e, AgentView& v, std::vector<uint32_t> tokens) {
    std::vector<wire::WireEvent> events;
    e.ServePrompt(tokens, &events);
    v.Apply(events);
  }
};

// A hand example of semantics.md section 5.
TEST(GroundTruthTest, MatchAttributesFastestTierAndSorts) {
  Fixture f;
  f.Serve(f.a, f.va, Tokens(12));  // w0: blocks [1..4], [5..8], [9..12] on device
  f.Serve(f.b, f.vb, Tokens(8));   // w1: the first two
  // The canonical hashes are the index's: test vector of semantics.md section 2.
  const auto truth = f.Sources();
  const std::vector<uint64_t> device = TierCanonical(truth[1], Tier::kDevice, false);
  ASSERT_EQ(device.size(), 2u);
  EXPECT_TRUE(std::count(device.begin(), device.end(), 4945711292740353085ull));

  // w0 now serves 3 other blocks: its device (3 blocks) offloads the old
  // prompt to the host, tail first.
  f.Serve(f.a, f.va, Tokens(12, 1000));
  const auto seq = Seq(Tokens(16));  // 4 blocks; the 4th is held nowhere
  const index::MatchResult m = MatchTruth(f.Sources(), "m", seq, false);
  EXPECT_EQ(m.blocks, 4u);
  ASSERT_EQ(m.workers.size(), 2u);
  // w0 holds 3 (all on host now), w1 2 on device: longest first.
  EXPECT_EQ(m.workers[0].source, (SourceKey{"w0", 0}));
  EXPECT_EQ(m.workers[0].longest, 3u);
  EXPECT_EQ(m.workers[0].host, 3u);
  EXPECT_EQ(m.workers[0].device_prefix, 0u);
  EXPECT_EQ(m.workers[1].source, (SourceKey{"w1", 1}));
  EXPECT_EQ(m.workers[1].longest, 2u);
  EXPECT_EQ(m.workers[1].device, 2u);
  EXPECT_EQ(m.workers[1].device_prefix, 2u);
  EXPECT_TRUE(MatchTruth(f.Sources(), "other", seq, false).workers.empty());
}

// The truth, loaded into the reference index, answers every match the same
// and has the same digest (the index's own section 6 code).
TEST(GroundTruthTest, AgreesWithTheReferenceIndex) {
  Fixture f;
  for (uint32_t p = 0; p < 6; ++p) {
    f.Serve(f.a, f.va, Tokens(4 * (1 + p % 4), 1 + 1000 * (p % 3)));
    f.Serve(f.b, f.vb, Tokens(4 * (1 + p % 3), 1 + 1000 * (p % 2)));
  }
  index::ReferenceIndex reference;
  const auto truth = f.Sources();
  for (const TruthSource& s : truth) {
    for (Tier tier : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
      for (uint64_t h : TierCanonical(s, tier, false)) {
        reference.RestoreEntry(s.model, s.key, tier, h, 4);
      }
    }
  }
  EXPECT_EQ(TruthDigest(truth), reference.Stats().digest);
  EXPECT_NE(TruthDigest(truth), 0u);
  EXPECT_EQ(DigestHex(0xabcull), "0000000000000abc");
  for (uint32_t root : {1u, 1001u, 2001u}) {
    for (size_t n : {4u, 8u, 16u, 20u}) {
      const auto seq = Seq(Tokens(n, root));
      index::MatchResult expected = *reference.MatchSequenceHashes("m", seq);
      index::MatchResult got = MatchTruth(truth, "m", seq, false);
      got.applied_seq = expected.applied_seq;
      EXPECT_EQ(got, expected) << root << " " << n;
    }
  }
  std::string json;
  WriteTruthJson(truth, 12, 12, &json);
  EXPECT_NE(json.find("\"digest\":\"" + DigestHex(TruthDigest(truth)) + "\""), std::string::npos);
  EXPECT_NE(json.find("\"cleared_by_fault\":false"), std::string::npos);
}

// After a fault clear the index may hold only what was announced after it:
// a store chained to a block announced before the clear is dropped
// (parent_not_found), placeholders of forgotten blocks do not resolve.
TEST(GroundTruthTest, IndexViewAfterAFaultClear) {
  Fixture f;
  f.Serve(f.b, f.vb, Tokens(8));
  f.vb.Clear();                        // e.g. an unrecoverable gap
  f.Serve(f.b, f.vb, Tokens(12));      // one new block, parent announced before the clear
  f.Serve(f.b, f.vb, Tokens(4, 500));  // a new root: held
  TruthSource s{"m", {"w1", 0}, 4, &f.b, &f.vb, true};
  EXPECT_EQ(TierCanonical(s, Tier::kDevice, false).size(), 4u);
  const auto since = TierCanonical(s, Tier::kDevice, true);
  ASSERT_EQ(since.size(), 1u);
  EXPECT_EQ(since[0], Seq(Tokens(4, 500))[0]);
  const std::vector<TruthSource> one{s};
  EXPECT_NE(TruthDigest(one, true), TruthDigest(one, false));
  EXPECT_EQ(TruthDigest(one, true), index::EntriesDigest("m", s.key, Tier::kDevice, since));
  EXPECT_EQ(MatchTruth(one, "m", Seq(Tokens(12)), true).workers.size(), 0u);
  EXPECT_EQ(MatchTruth(one, "m", Seq(Tokens(12)), false).workers.at(0).longest, 3u);
}

}  // namespace
}  // namespace kvindex::mockengine
