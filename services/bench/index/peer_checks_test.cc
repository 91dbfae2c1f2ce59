// The full peer workload (docs/benchmarks.md, "Peer workload") reproduces
// every published check. The expected values are the published ones, written
// here, not taken from the code under test: a change to the generator, the
// simulated engines or the index that alters the stream fails this test.
//
// About 12 s in a Release build: the whole stream (57 M block-ops) is
// generated and applied to a KvIndex, every query run twice.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "services/bench/index/peer_workload.h"
#include "shared/index/kv_index.h"
#include "shared/trace/mooncake_trace.h"

namespace kvindex::bench {
namespace {

TEST(PeerChecksTest, FullStreamMatchesThePublishedChecks) {
  const char* source_dir = std::getenv("KVINDEX_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr) << "KVINDEX_SOURCE_DIR not set (ctest sets it)";
  const std::string path = std::string(source_dir) + "/data/mooncake/conversation_trace.jsonl";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " not present";
  const auto trace = trace::ReadTrace(path, 0);
  ASSERT_TRUE(trace.ok()) << trace.status();

  const PeerConfig config;  // D = 4 copies, W = 64 workers, C = 156,250 blocks
  ASSERT_TRUE(config.IsReference());
  const PeerStream stream = GeneratePeerStream(*trace, config);
  EXPECT_EQ(stream.requests.size(), 48'124u);
  EXPECT_EQ(stream.stored_blocks, 33'545'088u);
  EXPECT_EQ(stream.removed_blocks, 23'545'088u);
  EXPECT_EQ(stream.stored_blocks + stream.removed_blocks, 57'090'176u);
  EXPECT_EQ(stream.events, 83'676u);
  EXPECT_EQ(stream.final_entries, 10'000'000u);
  // Mean query length 118.4 blocks (published to one decimal).
  ASSERT_FALSE(stream.requests.empty());
  const double mean_query =
      static_cast<double>(stream.query_blocks) / static_cast<double>(stream.requests.size());
  EXPECT_NEAR(mean_query, 118.4, 0.05);

  index::KvIndex index;
  const PeerRun run = RunPeer(index, stream);
  uint64_t entries = 0;
  for (const uint64_t e : run.stats.entries) entries += e;
  EXPECT_EQ(entries, 10'000'000u);
  EXPECT_EQ(run.block_ops, 57'090'176u);
  EXPECT_EQ(run.depth_interleaved, 27'982'544u);  // each query before its own events
  EXPECT_EQ(run.depth_final, 28'240'216u);        // every query on the final state
}

}  // namespace
}  // namespace kvindex::bench
