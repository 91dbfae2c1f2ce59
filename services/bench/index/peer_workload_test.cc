// The peer workload's hash functions match peer-workload.md's test vectors,
// and the simulated engines keep their bookkeeping consistent.
#include "services/bench/index/peer_workload.h"

#include <gtest/gtest.h>

#include "services/bench/index/baseline_index.h"
#include "shared/index/kv_index.h"

namespace kvindex::bench {
namespace {

// The test vectors of peer-workload.md ("Hashes"), written here, not taken
// from the code under test.
TEST(PeerWorkloadTest, HashVectorsMatchTheSpec) {
  const uint64_t l00 = PeerLocal(0, 0, 0);
  EXPECT_EQ(l00, 0x2ff145472e2746d6ull);
  EXPECT_EQ(PeerChain(kPeerSeqRoot, l00), 0x403c2973c5f099b1ull);
  uint64_t seq = kPeerSeqRoot;
  uint64_t local = 0;
  for (uint64_t i = 0; i < 32; ++i) {
    local = PeerLocal(0, 0, i);
    seq = PeerChain(seq, local);
  }
  EXPECT_EQ(local, 0x53fa36015a1f6352ull);  // d=0, h=0, i=31
  EXPECT_EQ(seq, 0x8b06455e69089df5ull);
  const uint64_t l10 = PeerLocal(0, 1, 0);
  EXPECT_EQ(l10, 0x6b07b7d0a7afe795ull);
  EXPECT_EQ(PeerChain(seq, l10), 0x8087a290540601d5ull);  // block 32 of the chain
  const uint64_t ld1 = PeerLocal(1, 0, 0);
  EXPECT_EQ(ld1, 0x5011d7e41485a44bull);
  EXPECT_EQ(PeerChain(kPeerSeqRoot, ld1), 0xed1685d7f67a008dull);
}

std::vector<trace::TraceRequest> SmallTrace() {
  std::vector<trace::TraceRequest> trace;
  for (uint64_t j = 0; j < 200; ++j) {
    trace::TraceRequest r;
    r.hash_ids.push_back(0);
    for (uint64_t k = 0; k < 1 + j % 5; ++k) r.hash_ids.push_back(1 + (j % 7) * 10 + k);
    trace.push_back(r);
  }
  return trace;
}

TEST(PeerWorkloadTest, StreamBookkeepingAndIndexesAgree) {
  PeerConfig config;
  config.workers = 4;
  config.capacity = 300;
  config.copies = 2;
  const PeerStream stream = GeneratePeerStream(SmallTrace(), config);
  ASSERT_EQ(stream.requests.size(), 400u);
  EXPECT_EQ(stream.stored_blocks - stream.removed_blocks, stream.final_entries);
  EXPECT_GT(stream.removed_blocks, 0u);
  index::KvIndex ours;
  BaselineIndex base(kPeerModel);
  const PeerRun a = RunPeer(ours, stream);
  const PeerRun b = RunPeer(base, stream);
  EXPECT_EQ(a.depth_interleaved, b.depth_interleaved);
  EXPECT_EQ(a.depth_final, b.depth_final);
  EXPECT_GT(a.depth_final, 0u);
  EXPECT_EQ(a.stats.entries[0], stream.final_entries);
  EXPECT_EQ(b.stats.entries[0], stream.final_entries);
}

}  // namespace
}  // namespace kvindex::bench
