#include "shared/epp/endpoints.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace kvindex::epp {
namespace {

TEST(EndpointsTest, ParsesFileDiscoveryShape) {
  auto parsed = ParseEndpointsFile(
      "endpoints:\n"
      "  - {name: pod-a, address: 10.0.0.7, port: 8000, labels: {model: m, dp_rank: '1'}}\n"
      "  - {name: pod-b, address: 10.0.0.8, port: 8001, labels: {worker: w9}}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].address, "10.0.0.7:8000");
  EXPECT_EQ((*parsed)[0].source, (SourceKey{"pod-a", 1}));
  EXPECT_EQ((*parsed)[0].model, "m");
  EXPECT_EQ((*parsed)[1].source, (SourceKey{"w9", 0}));
  EXPECT_TRUE((*parsed)[1].model.empty());
  EXPECT_FALSE(ParseEndpointsFile("endpoints: [{name: a, port: 1}]").ok());
  EXPECT_FALSE(ParseEndpointsFile("endpoints: [{name: a, address: x, port: 0}]").ok());
  EXPECT_FALSE(ParseEndpointsFile("[1, 2]").ok());
  EXPECT_FALSE(ParseEndpointsFile("endpoints: {").ok());
}

TEST(EndpointsTest, ReReadsOnChangeAndKeepsTheOldOnError) {
  char dir[] = "/tmp/kvindex-endpoints-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/endpoints.yaml";
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  write("endpoints: [{name: a, address: 10.0.0.1, port: 80}]\n");
  EndpointTable table;
  table.SetStatic({{"10.0.0.9:1", {"s", 0}, ""}});
  ASSERT_TRUE(table.SetFile(path, std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(table.Snapshot()->endpoints.size(), 2u);
  write(
      "endpoints: [{name: a, address: 10.0.0.1, port: 80}, {name: b, address: 10.0.0.2, "
      "port: 80}]\n");
  table.MaybeReload();
  auto snapshot = table.Snapshot();
  ASSERT_EQ(snapshot->endpoints.size(), 3u);
  EXPECT_EQ(snapshot->by_source.at(SourceKey{"b", 0}), 2u);
  write("endpoints: [{broken\n");
  table.MaybeReload();
  EXPECT_EQ(table.Snapshot()->endpoints.size(), 3u);
  EXPECT_EQ(table.reload_errors(), 1u);
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace kvindex::epp
