// The peer workload's hash functions match peer-workload.md's test vectors,
// and the simulated engines keep their bookkeeping consistent.
#include "services/bench/index/peer_workload.h"

#include <gtest/gtest.h>

#include "services/bench/index/baseline_index.h"
#include "shared/index/kv_index.h"

namespace kvindex::bench {
namespace {

TEST(PeerWorkloadTest, HashVectorsMatchTheSpec) {
  for (const PeerCheck& c : PeerHashVectorChecks()) {
    EXPECT_TRUE(c.ok()) << c.name << " got " << std::hex << c.got << " want " << c.want;
  }
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
