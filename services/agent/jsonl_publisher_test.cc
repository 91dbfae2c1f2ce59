#include "services/agent/jsonl_publisher.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvindex::agent {
namespace {

TEST(JsonlPublisherTest, StoredEventKeepsU64Exact) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "M";
  e.source = {"w0", 1};
  e.agent = "node-a";
  e.event_id = 18446744073709551615ull;
  e.timestamp_ns = 1764460000000000001ull;
  e.tier = Tier::kHost;
  e.block_size = 16;
  e.parent_hash = 12827409268353072861ull;
  e.block_hashes = {15671544057904749233ull, 1};
  const auto j = nlohmann::json::parse(PlacementEventJson(e));
  EXPECT_EQ(j["kind"], "stored");
  EXPECT_EQ(j["worker"], "w0");
  EXPECT_EQ(j["dp_rank"], 1);
  EXPECT_EQ(j["tier"], "host");
  EXPECT_EQ(j["event_id"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(j["parent_hash"].get<uint64_t>(), 12827409268353072861ull);
  EXPECT_EQ(j["block_hashes"][0].get<uint64_t>(), 15671544057904749233ull);
  EXPECT_EQ(j["block_size"], 16);
}

TEST(JsonlPublisherTest, ClearedAndHeartbeat) {
  PlacementEvent cleared;
  cleared.kind = PlacementKind::kCleared;
  cleared.source = {"w\"0", 0};
  auto j = nlohmann::json::parse(PlacementEventJson(cleared));
  EXPECT_EQ(j["kind"], "cleared");
  EXPECT_EQ(j["worker"], "w\"0");
  EXPECT_FALSE(j.contains("block_hashes"));

  PlacementEvent heartbeat;
  heartbeat.kind = PlacementKind::kHeartbeat;
  heartbeat.lease_ms = 30000;
  heartbeat.sources = {{"w0", 0}, {"w0", 1}};
  j = nlohmann::json::parse(PlacementEventJson(heartbeat));
  EXPECT_EQ(j["kind"], "heartbeat");
  EXPECT_EQ(j["lease_ms"], 30000);
  ASSERT_EQ(j["sources"].size(), 2u);
  EXPECT_EQ(j["sources"][1]["dp_rank"], 1);
}

TEST(JsonlPublisherTest, WritesOneLinePerEventAndRoot) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  JsonlPublisher publisher(file);
  // A stored event with a parent, a removal, and a stored event at the root.
  std::vector<PlacementEvent> events(3);
  events[0].parent_hash = 42;
  events[1].kind = PlacementKind::kRemoved;
  events[2].parent_hash.reset();
  ASSERT_TRUE(publisher.Publish(events).ok());
  ASSERT_TRUE(publisher.Flush().ok());
  std::rewind(file);
  char line[4096];
  std::vector<nlohmann::json> lines;
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["kind"], "stored");
  EXPECT_EQ(lines[0]["parent_hash"].get<uint64_t>(), 42u);
  EXPECT_EQ(lines[1]["kind"], "removed");
  EXPECT_FALSE(lines[1].contains("parent_hash"));
  EXPECT_EQ(lines[2]["kind"], "stored");
  ASSERT_TRUE(lines[2].contains("parent_hash"));
  EXPECT_TRUE(lines[2]["parent_hash"].is_null());
  std::fclose(file);
}

}  // namespace
}  // namespace kvindex::agent
