#include "shared/epp/endpoints.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace kvindex::epp {
namespace {

Endpoint Ep(const std::string& address, const std::string& worker) {
  Endpoint endpoint;
  endpoint.address = address;
  endpoint.source.worker = worker;
  endpoint.model = "m";
  return endpoint;
}

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

// Announced endpoints (the log's, --nats) follow their provider, asked again
// when due; a source that a static or file endpoint names keeps that one.
TEST(EndpointsTest, AnnouncedEndpointsFollowTheProviderUnderTheStaticOverride) {
  std::vector<Endpoint> live = {Ep("10.0.0.1:8000", "w0"), Ep("10.0.0.2:8000", "w1")};
  EndpointTable table;
  table.SetStatic({Ep("10.9.9.9:8000", "w1")});
  table.SetAnnounced([&live] { return live; }, std::chrono::milliseconds(0));
  auto addresses = [&table] {
    std::vector<std::string> out;
    for (const Endpoint& e : table.Snapshot()->endpoints) out.push_back(e.address);
    return out;
  };
  EXPECT_EQ(addresses(), (std::vector<std::string>{"10.9.9.9:8000", "10.0.0.1:8000"}));
  EXPECT_EQ(table.announced(), 1u);
  live.erase(live.begin());  // w0's agent expired
  live.push_back(Ep("10.0.0.3:8000", "w2"));
  table.MaybeReload();
  EXPECT_EQ(addresses(), (std::vector<std::string>{"10.9.9.9:8000", "10.0.0.3:8000"}));
  live.clear();
  table.MaybeReload();
  EXPECT_EQ(addresses(), (std::vector<std::string>{"10.9.9.9:8000"}));
  EXPECT_EQ(table.announced(), 0u);
}

}  // namespace
}  // namespace kvindex::epp
