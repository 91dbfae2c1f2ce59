// The compatibility APIs against a real server over a real index: golden
// request/response pairs in each owner's documented shape, answers derived
// independently from /v1/match on the same state, and every error answered
// with its status and counted reason.
#include "shared/query/compat_api.h"
#include "shared/consume/testing/wait_applied.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "shared/consume/in_process_log_reader.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/http/client.h"
#include "shared/index/kv_index.h"
#include "shared/query/router_api.h"

namespace kvindex::query {
namespace {

using nlohmann::json;
using Api = CompatApi::Api;
using Outcome = CompatApi::Outcome;

class CompatApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    probe_.Bind(&index_, [this] { return loop_.Pending(); });
    ASSERT_TRUE(loop_.Start().ok());
    std::vector<uint32_t> tokens;
    for (uint32_t t = 1; t <= 13; ++t) tokens.push_back(t);
    tokens_ = tokens;
    hashing::ComputeLocalHashes(tokens, 4, hashing::LocalHashSeed("", ""), &local_);
    hashing::ComputeSequenceHashes(local_, std::nullopt, &seq_);
    ASSERT_EQ(seq_.size(), 3u);

    // 101/0: device 0..2. 202/1: device 0, host 0..1, disk 2. 202/0: host 0.
    // 303/0: device 0 and 2, host 1 (device_prefix 1 < device 2).
    // w-x/0: device 0 (not a Dynamo WorkerId).
    std::vector<PlacementEvent> events = {
        Stored("101", 0, Tier::kDevice, {seq_[0], seq_[1], seq_[2]}),
        Stored("202", 1, Tier::kDevice, {seq_[0]}),
        Stored("202", 1, Tier::kHost, {seq_[0], seq_[1]}),
        Stored("202", 1, Tier::kDisk, {seq_[2]}),
        Stored("202", 0, Tier::kHost, {seq_[0]}),
        Stored("303", 0, Tier::kDevice, {seq_[0], seq_[2]}),
        Stored("303", 0, Tier::kHost, {seq_[1]}),
        Stored("w-x", 0, Tier::kDevice, {seq_[0]}),
    };
    ASSERT_TRUE(sink_.Publish(events).ok());
    ASSERT_TRUE(consume::testing::WaitUntilApplied(loop_));

    ApiContext context;
    context.index = &index_;
    context.apply = &loop_;
    context.probe = &probe_;
    context.registry = registry_.get();
    context.configured_models = {{"m", 4}};
    api_ = std::make_unique<RouterApi>(ApiOptions{}, context);
    http::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.threads = 2;
    options.max_body_bytes = size_t{8} << 20;
    options.max_body_total_bytes = size_t{32} << 20;
    server_ = std::make_unique<http::Server>(options);
    api_->Register(*server_);
    ASSERT_TRUE(server_->Start().ok());
  }

  static PlacementEvent Stored(std::string worker, uint32_t rank, Tier tier,
                               std::vector<uint64_t> hashes) {
    PlacementEvent e;
    e.kind = PlacementKind::kStored;
    e.model = "m";
    e.source = {std::move(worker), rank};
    e.agent = "node-a";
    e.tier = tier;
    e.block_size = 4;
    e.block_hashes = std::move(hashes);
    return e;
  }

  http::ClientResponse Call(std::string method, std::string path, std::string body = "") {
    http::ClientRequest request;
    request.method = std::move(method);
    request.url.host = "127.0.0.1";
    request.url.port = server_->port();
    request.path = std::move(path);
    request.body = std::move(body);
    auto response = http::Fetch(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : http::ClientResponse{};
  }

  // The answer and the count of its outcome, which must have gone up by one.
  json Expect(Api api, Outcome outcome, int status, const std::string& path,
              const std::string& body, const std::string& message_part = "") {
    const uint64_t before = api_compat().count(api, outcome);
    auto r = Call("POST", path, body);
    EXPECT_EQ(r.status, status) << path << " " << body.substr(0, 200) << " -> " << r.body;
    EXPECT_EQ(api_compat().count(api, outcome), before + 1)
        << CompatApi::OutcomeLabel(outcome) << " not counted for " << body.substr(0, 200);
    if (!message_part.empty()) {
      EXPECT_NE(r.body.find(message_part), std::string::npos) << r.body;
    }
    return json::parse(r.body, nullptr, false);
  }

  const CompatApi& api_compat() { return api_->compat(); }

  static std::string Array(const std::vector<int64_t>& values) {
    std::string out = "[";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
    return out + "]";
  }
  static std::string Array(const std::vector<uint64_t>& values) {
    std::string out = "[";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
    return out + "]";
  }
  static std::string Array(const std::vector<uint32_t>& values) {
    return Array(std::vector<uint64_t>(values.begin(), values.end()));
  }
  std::vector<int64_t> DynamoHashes(size_t blocks) const {
    std::vector<int64_t> out;
    for (size_t i = 0; i < blocks; ++i) out.push_back(static_cast<int64_t>(local_[i]));
    return out;
  }

  InProcessSink sink_;
  consume::InProcessLogReader reader_{&sink_};
  index::KvIndex index_;
  consume::RouterProbe probe_;
  consume::ApplyLoop loop_{&reader_, &index_, &probe_, {}};
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<RouterApi> api_;
  std::unique_ptr<http::Server> server_;
  std::vector<uint32_t> tokens_;
  std::vector<uint64_t> local_, seq_;
};

// Dynamo's TieredQueryResponse {block_size, tiered: WireTieredMatchDetails}:
// serde's shapes (tuples as arrays, StorageTier in snake_case).
TEST_F(CompatApiTest, DynamoGolden) {
  const uint64_t omitted = api_compat().workers_not_numeric();
  json got = Expect(
      Api::kDynamoTiered, Outcome::kOk, 200, "/query_tiered_by_hash",
      R"({"block_hashes":)" + Array(DynamoHashes(3)) + R"(,"model_name":"m","routing_group":""})");
  json want = json::parse(R"({"block_size":4,"tiered":{
    "device":{"scores":[[{"worker_id":101,"dp_rank":0},3],[{"worker_id":202,"dp_rank":1},1],
                        [{"worker_id":303,"dp_rank":0},1]],
              "frequencies":[3,1,1]},
    "lower_tier":[["host_pinned",{"hits":[[{"worker_id":202,"dp_rank":1},1],
                                         [{"worker_id":303,"dp_rank":0},1],
                                         [{"worker_id":202,"dp_rank":0},1]]}],
                  ["disk",{"hits":[[{"worker_id":202,"dp_rank":1},1]]}],
                  ["external",{"hits":[]}]]}})");
  EXPECT_EQ(got, want) << got.dump();
  EXPECT_EQ(api_compat().workers_not_numeric(), omitted + 1);  // w-x
  // The hashes are Dynamo's i64: the first one is negative on the wire.
  EXPECT_LT(DynamoHashes(1)[0], 0);
  // No hashes: nothing matched, still the full shape.
  got = Expect(Api::kDynamoTiered, Outcome::kOk, 200, "/query_tiered_by_hash",
               R"({"block_hashes":[],"model_name":"m","routing_group":"g"})");
  EXPECT_EQ(got["tiered"]["device"]["scores"], json::array());
  EXPECT_EQ(got["tiered"]["lower_tier"].size(), 3u);
}

// The Mooncake RFC #1403 answer, per tenant and instance, in tokens.
TEST_F(CompatApiTest, MooncakeGolden) {
  json want = json::parse(R"({"default":{
    "101":{"longest_matched":12,"GPU":12,"CPU":12,"DISK":12,"DP":{"0":12}},
    "202":{"longest_matched":12,"GPU":4,"CPU":8,"DISK":12,"DP":{"0":4,"1":12}},
    "303":{"longest_matched":12,"GPU":8,"CPU":12,"DISK":12,"DP":{"0":12}},
    "w-x":{"longest_matched":4,"GPU":4,"CPU":4,"DISK":4,"DP":{"0":4}}}})");
  json got = Expect(Api::kMooncakeQuery, Outcome::kOk, 200, "/query",
                    R"({"model":"m","lora_name":null,"token_ids":)" + Array(tokens_) +
                        R"(,"tenant_id":"default","block_size":4,"cache_salt":""})");
  EXPECT_EQ(got, want) << got.dump();
  got = Expect(Api::kMooncakeQueryByHash, Outcome::kOk, 200, "/query_by_hash",
               R"({"model":"m","seq_hashes":)" + Array(seq_) + R"(,"block_size":4})");
  EXPECT_EQ(got, want) << got.dump();
  // One instance, another tenant name.
  got = Expect(Api::kMooncakeQuery, Outcome::kOk, 200, "/query",
               R"({"model":"m","token_ids":)" + Array(tokens_) +
                   R"(,"tenant_id":"t1","instance_id":"202"})");
  EXPECT_EQ(got, json::parse(R"({"t1":{"202":{"longest_matched":12,"GPU":4,"CPU":8,"DISK":12,
                                 "DP":{"0":4,"1":12}}}})"))
      << got.dump();
  // The legacy hash field name and the explicit seed.
  got = Expect(Api::kMooncakeQueryByHash, Outcome::kOk, 200, "/query_by_hash",
               R"({"model":"m","block_hash":)" + Array(seq_) + R"(,"seed":1337})");
  EXPECT_EQ(got, want);
}

// Every answer is /v1/match's on the same state, re-expressed: computed
// here from /v1/match's JSON, for every prefix length.
TEST_F(CompatApiTest, EqualToMatch) {
  for (size_t n = 0; n <= tokens_.size(); ++n) {
    std::vector<uint32_t> tokens(tokens_.begin(), tokens_.begin() + static_cast<long>(n));
    auto m = Call("POST", "/v1/match", R"({"model":"m","tokens":)" + Array(tokens) + "}");
    ASSERT_EQ(m.status, 200);
    json match = json::parse(m.body);
    // Mooncake, from /v1/match.
    json want = {{"default", json::object()}};
    for (const json& w : match["workers"]) {
      const std::string worker = w["worker"];
      json& inst = want["default"][worker];
      if (inst.is_null()) inst = json::object();
      auto up = [&](const char* key, uint64_t v) {
        inst[key] = std::max<uint64_t>(inst.value(key, uint64_t{0}), v);
      };
      const uint64_t d = w["device"], h = w["host"], k = w["disk"];
      up("longest_matched", uint64_t{w["longest"]} * 4);
      up("GPU", d * 4);
      up("CPU", (d + h) * 4);
      up("DISK", (d + h + k) * 4);
      inst["DP"][std::to_string(uint32_t{w["dp_rank"]})] = uint64_t{w["longest"]} * 4;
    }
    auto q = Call("POST", "/query", R"({"model":"m","token_ids":)" + Array(tokens) + "}");
    ASSERT_EQ(q.status, 200) << q.body;
    EXPECT_EQ(json::parse(q.body), want) << n;
    const size_t blocks = n / 4;
    std::vector<uint64_t> seq(seq_.begin(), seq_.begin() + static_cast<long>(blocks));
    auto qh = Call("POST", "/query_by_hash", R"({"model":"m","seq_hashes":)" + Array(seq) + "}");
    EXPECT_EQ(json::parse(qh.body), want) << n;
    // Dynamo, from /v1/match.
    json scores = json::array(), host = json::array(), disk = json::array();
    std::vector<uint64_t> freq;
    for (const json& w : match["workers"]) {
      const std::string worker = w["worker"];
      if (worker == "w-x") continue;
      json id = {{"worker_id", std::stoull(worker)}, {"dp_rank", w["dp_rank"]}};
      const uint32_t dp = w["device_prefix"];
      if (dp > 0) scores.push_back(json::array({id, dp}));
      if (uint32_t{w["host"]} > 0) host.push_back(json::array({id, w["host"]}));
      if (uint32_t{w["disk"]} > 0) disk.push_back(json::array({id, w["disk"]}));
      if (freq.size() < dp) freq.resize(dp);
      for (uint32_t i = 0; i < dp; ++i) ++freq[i];
    }
    json dynamo = {
        {"block_size", 4},
        {"tiered",
         {{"device", {{"scores", scores}, {"frequencies", freq}}},
          {"lower_tier", json::array({json::array({"host_pinned", {{"hits", host}}}),
                                      json::array({"disk", {{"hits", disk}}}),
                                      json::array({"external", {{"hits", json::array()}}})})}}}};
    auto t = Call("POST", "/query_tiered_by_hash",
                  R"({"model_name":"m","routing_group":"","block_hashes":)" +
                      Array(DynamoHashes(blocks)) + "}");
    EXPECT_EQ(json::parse(t.body), dynamo) << n << " " << t.body;
  }
}

TEST_F(CompatApiTest, ErrorsAnsweredAndCounted) {
  const std::string hashes = Array(DynamoHashes(2));
  // Dynamo.
  Expect(Api::kDynamoTiered, Outcome::kInvalidRequest, 400, "/query_tiered_by_hash",
         R"({"block_hashes":[1,2,)", "invalid JSON");
  Expect(Api::kDynamoTiered, Outcome::kInvalidRequest, 400, "/query_tiered_by_hash",
         R"({"block_hashes":[1.5],"model_name":"m"})", "block_hashes");
  Expect(Api::kDynamoTiered, Outcome::kInvalidRequest, 400, "/query_tiered_by_hash",
         R"({"block_hashes":[18446744073709551616],"model_name":"m"})", "block_hashes");
  Expect(Api::kDynamoTiered, Outcome::kMissingField, 400, "/query_tiered_by_hash",
         R"({"block_hashes":[1]})", "model_name");
  Expect(Api::kDynamoTiered, Outcome::kMissingField, 400, "/query_tiered_by_hash",
         R"({"model_name":"m"})", "block_hashes");
  Expect(Api::kDynamoTiered, Outcome::kUnknownModel, 404, "/query_tiered_by_hash",
         R"({"block_hashes":)" + hashes + R"(,"model_name":"nope","routing_group":""})", "nope");
  std::string many = "[";
  for (size_t i = 0; i <= 1'000'000; ++i) many += i ? ",0" : "0";
  many += "]";
  Expect(Api::kDynamoTiered, Outcome::kTooManyHashes, 400, "/query_tiered_by_hash",
         R"({"model_name":"m","block_hashes":)" + many + "}", "more than 1000000");
  // Mooncake.
  Expect(Api::kMooncakeQuery, Outcome::kInvalidRequest, 400, "/query", "[1,2]", "JSON object");
  Expect(Api::kMooncakeQuery, Outcome::kInvalidRequest, 400, "/query",
         R"({"model":"m","token_ids":[-1]})", "token_ids");
  Expect(Api::kMooncakeQuery, Outcome::kMissingField, 400, "/query", R"({"token_ids":[1]})",
         "'model'");
  Expect(Api::kMooncakeQuery, Outcome::kMissingField, 400, "/query", R"({"model":"m"})",
         "token_ids");
  Expect(Api::kMooncakeQuery, Outcome::kUnknownModel, 404, "/query",
         R"({"model":"nope","token_ids":[1,2,3,4]})", "nope");
  Expect(Api::kMooncakeQuery, Outcome::kBlockSizeMismatch, 400, "/query",
         R"({"model":"m","token_ids":[1,2,3,4],"block_size":64})", "(4)");
  Expect(Api::kMooncakeQuery, Outcome::kInvalidRequest, 400, "/query",
         R"({"model":"m","token_ids":[1,2,3,4],"lora_id":3})", "lora_name");
  Expect(Api::kMooncakeQuery, Outcome::kTooManyHashes, 400, "/query",
         R"({"model":"m","token_ids":)" + many + "}", "more than 1000000");
  Expect(Api::kMooncakeQueryByHash, Outcome::kUnsupportedSeed, 400, "/query_by_hash",
         R"({"model":"m","seq_hashes":[1],"seed":0})", "1337");
  Expect(Api::kMooncakeQueryByHash, Outcome::kBlockSizeMismatch, 400, "/query_by_hash",
         R"({"model":"m","seq_hashes":[1],"block_size":16})", "block_size");
  Expect(Api::kMooncakeQueryByHash, Outcome::kMissingField, 400, "/query_by_hash",
         R"({"model":"m"})", "seq_hashes");
  Expect(Api::kMooncakeQueryByHash, Outcome::kTooManyHashes, 400, "/query_by_hash",
         R"({"model":"m","seq_hashes":)" + many + "}", "more than 1000000");
  // Registration: engines come from --source or kvindex-agent (this context
  // has no ingest side: the router reads the replicated log).
  Expect(Api::kMooncakeRegister, Outcome::kRegistrationRefused, 409, "/register",
         R"({"endpoint":"tcp://127.0.0.1:5557","type":"vLLM","modelname":"m",
             "instance_id":"x","block_size":4,"dp_rank":0})",
         "kvindex-agent --nats");
  Expect(Api::kMooncakeRegister, Outcome::kInvalidRequest, 400, "/register", "{", "invalid JSON");
  Expect(Api::kMooncakeUnregister, Outcome::kRegistrationRefused, 409, "/unregister",
         R"({"instance_id":"x","modelname":"m"})", "--source");
  // The counts reach /metrics.
  auto metrics = Call("GET", "/metrics");
  EXPECT_NE(
      metrics.body.find(
          R"(kvindex_router_compat_requests_total{api="mooncake_query",outcome="block_size_mismatch"} 1)"),
      std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find(
                R"(kvindex_router_compat_workers_omitted_total{reason="worker_id_not_numeric"})"),
            std::string::npos);
}

TEST_F(CompatApiTest, Workers) {
  auto r = Call("GET", "/workers");
  ASSERT_EQ(r.status, 200);
  json want = json::parse(R"([
    {"instance_id":"101","modelname":"m","tenant_id":"default","dp_ranks":[0],"entries":3,
     "source":"configured"},
    {"instance_id":"202","modelname":"m","tenant_id":"default","dp_ranks":[0,1],"entries":5,
     "source":"configured"},
    {"instance_id":"303","modelname":"m","tenant_id":"default","dp_ranks":[0],"entries":3,
     "source":"configured"},
    {"instance_id":"w-x","modelname":"m","tenant_id":"default","dp_ranks":[0],"entries":1,
     "source":"configured"}])");
  EXPECT_EQ(json::parse(r.body), want) << r.body;
}

}  // namespace
}  // namespace kvindex::query
