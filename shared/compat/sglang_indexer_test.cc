// SGLang's KV indexer API over a real index: golden answers in their .proto's
// shapes for a state whose /v1/match rows are known, the hash mapping (their
// sfixed64 = our sequence hash), every error with SGLang's status code and
// its counted reason, and the same answers through the real gRPC server.
#include "shared/compat/sglang_indexer.h"
#include "shared/consume/testing/wait_applied.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kv_indexer.grpc.pb.h"
#include "shared/compat/sglang_server.h"
#include "shared/consume/in_process_log_reader.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/index/kv_index.h"
#include "shared/query/compat_hashes.h"
#include "shared/query/router_api.h"

namespace kvindex::compat {
namespace {

using Api = query::CompatApi::Api;
using Outcome = query::CompatApi::Outcome;
using query::compat::ToSglangI64;

class SglangIndexerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_.Bind(&index_, [this] { return loop_.Pending(); });
    ASSERT_TRUE(loop_.Start().ok());
    std::vector<uint32_t> tokens;
    for (uint32_t t = 1; t <= 13; ++t) tokens.push_back(t);
    std::vector<uint64_t> local;
    hashing::ComputeLocalHashes(tokens, 4, hashing::LocalHashSeed("", ""), &local);
    hashing::ComputeSequenceHashes(local, std::nullopt, &seq_);
    ASSERT_EQ(seq_.size(), 3u);
    // 101/0: device 0..2. 202/1: device 0, host 0..1, disk 2. 202/0: host 0.
    // 303/0: device 0 and 2, host 1. w-x/0: device 0 (no address).
    // 404/0: external 0 (no SGLang tier).
    Publish({
        Stored("m", "101", 0, Tier::kDevice, {seq_[0], seq_[1], seq_[2]}),
        Stored("m", "202", 1, Tier::kDevice, {seq_[0]}),
        Stored("m", "202", 1, Tier::kHost, {seq_[0], seq_[1]}),
        Stored("m", "202", 1, Tier::kDisk, {seq_[2]}),
        Stored("m", "202", 0, Tier::kHost, {seq_[0]}),
        Stored("m", "303", 0, Tier::kDevice, {seq_[0], seq_[2]}),
        Stored("m", "303", 0, Tier::kHost, {seq_[1]}),
        Stored("m", "w-x", 0, Tier::kDevice, {seq_[0]}),
        Stored("m", "404", 0, Tier::kExternal, {seq_[0]}),
    });
    query::ApiContext context;
    context.index = &index_;
    context.apply = &loop_;
    context.probe = &probe_;
    context.configured_models = {{"m", 4}};
    api_ = std::make_unique<query::RouterApi>(query::ApiOptions{}, context);
    indexer_ = MakeIndexer("");
  }

  void Publish(std::vector<PlacementEvent> events) {
    ASSERT_TRUE(sink_.Publish(events).ok());
    ASSERT_TRUE(consume::testing::WaitUntilApplied(loop_));
  }

  std::unique_ptr<SglangIndexer> MakeIndexer(std::string model) {
    SglangOptions options;
    options.model = std::move(model);
    options.address = Address;
    return std::make_unique<SglangIndexer>(&api_->context(), std::move(options));
  }

  static std::string Address(const SourceKey& source) {
    if (source.worker == "101") return "http://10.0.0.1:30000";
    if (source.worker == "202") return "http://10.0.0.2:30000";  // both ranks
    if (source.worker == "303") return "http://10.0.0.3:30000";
    if (source.worker == "404") return "http://10.0.0.4:30000";
    return "";
  }

  static PlacementEvent Stored(std::string model, std::string worker, uint32_t rank, Tier tier,
                               std::vector<uint64_t> hashes) {
    PlacementEvent e;
    e.kind = PlacementKind::kStored;
    e.model = std::move(model);
    e.source = {std::move(worker), rank};
    e.agent = "node-a";
    e.tier = tier;
    e.block_size = 4;
    e.block_hashes = std::move(hashes);
    return e;
  }

  // Our sequence hashes as SGLang sends them (sfixed64).
  std::vector<int64_t> Wire(size_t blocks) const {
    std::vector<int64_t> out;
    for (size_t i = 0; i < blocks; ++i) out.push_back(ToSglangI64(seq_[i]));
    return out;
  }

  static pb::MatchExternalKvPrefixRequest PrefixRequest(const std::vector<int64_t>& hashes,
                                                        uint32_t max_blocks = 0) {
    pb::MatchExternalKvPrefixRequest request;
    request.mutable_hashes()->Add(hashes.begin(), hashes.end());
    request.set_max_blocks(max_blocks);
    return request;
  }

  uint64_t Count(Api api, Outcome outcome) const { return api_->compat().count(api, outcome); }

  InProcessSink sink_;
  consume::InProcessLogReader reader_{&sink_};
  index::KvIndex index_;
  consume::RouterProbe probe_;
  consume::ApplyLoop loop_{&reader_, &index_, &probe_, {}};
  std::unique_ptr<query::RouterApi> api_;
  std::unique_ptr<SglangIndexer> indexer_;
  std::vector<uint64_t> seq_;
};

std::string Text(const pb::MatchExternalKvPrefixResponse& r) {
  std::string out =
      "best " + std::to_string(r.best_prefix_blocks()) + " read " + std::to_string(r.blocks_read());
  for (const auto& m : r.matches()) {
    out += " [" + m.worker_address() + " " + m.worker_id() + " " +
           std::to_string(m.matched_prefix_blocks()) + "]";
  }
  return out;
}

std::string Text(const pb::MatchExternalKvResponse& r, const std::vector<uint64_t>& seq) {
  std::string out;
  for (const auto& node : r.matches()) {
    out += "[" + node.worker_id() + " " + node.address();
    for (const auto& tier : node.hashes_by_tier()) {
      out += " " + std::string(pb::TierType_Name(tier.tier())) + ":";
      for (int64_t h : tier.hashes()) {
        size_t i = 0;
        while (i < seq.size() && ToSglangI64(seq[i]) != h) ++i;
        out += std::to_string(i);
      }
    }
    out += "]";
  }
  return out;
}

// MatchExternalKvPrefix: per address the longest prefix (/v1/match's
// `longest`: any tier), ranks sharing an address merged to their best,
// workers without an address left out, sorted by prefix descending.
// sgl-router's own hashes: translated through the alias map the apply
// loop feeds (here by hand, with the stored event an SGLang agent publishes),
// they get the answer our hashes get; without the map, nothing (fail closed).
TEST_F(SglangIndexerTest, SglangHashesAnswerThroughTheAliasMap) {
  SglangAliasMap aliases(&index_);
  PlacementEvent stored = Stored("m", "101", 0, Tier::kDevice, {seq_[0], seq_[1], seq_[2]});
  const std::vector<int64_t> sglang = {-5, 6, INT64_MIN};
  for (int64_t h : sglang) stored.sglang_hashes.push_back(static_cast<uint64_t>(h));
  aliases.OnApplied({&stored, 1});  // the index holds these blocks (SetUp)
  SglangOptions options;
  options.address = Address;
  options.aliases = &aliases;
  SglangIndexer indexer(&api_->context(), std::move(options));

  pb::MatchExternalKvPrefixResponse theirs, ours, bypassed;
  ASSERT_TRUE(indexer.MatchPrefix(PrefixRequest(sglang), &theirs).ok());
  ASSERT_TRUE(indexer.MatchPrefix(PrefixRequest(Wire(3)), &ours).ok());
  EXPECT_EQ(Text(theirs), Text(ours));
  EXPECT_EQ(theirs.best_prefix_blocks(), 3u);
  // A prefix of theirs, and theirs then ours mixed: the same lookup.
  ASSERT_TRUE(indexer.MatchPrefix(PrefixRequest({sglang[0], Wire(2)[1]}), &theirs).ok());
  ASSERT_TRUE(indexer.MatchPrefix(PrefixRequest(Wire(2)), &ours).ok());
  EXPECT_EQ(Text(theirs), Text(ours));
  ASSERT_TRUE(indexer_->MatchPrefix(PrefixRequest(sglang), &bypassed).ok());
  EXPECT_EQ(bypassed.matches_size(), 0);

  // MatchExternalKv reports the hashes as sent.
  pb::MatchExternalKvRequest request;
  request.mutable_hashes()->Add(sglang.begin(), sglang.end());
  pb::MatchExternalKvResponse nodes;
  ASSERT_TRUE(indexer.Match(request, &nodes).ok());
  bool found = false;
  for (const auto& node : nodes.matches()) {
    if (node.worker_id() != "101") continue;
    found = true;
    ASSERT_EQ(node.hashes_by_tier_size(), 1);
    EXPECT_EQ(node.hashes_by_tier(0).tier(), pb::TIER_HBM);
    EXPECT_EQ(std::vector<int64_t>(node.hashes_by_tier(0).hashes().begin(),
                                   node.hashes_by_tier(0).hashes().end()),
              sglang);
  }
  EXPECT_TRUE(found);
}

TEST_F(SglangIndexerTest, PrefixGolden) {
  pb::MatchExternalKvPrefixResponse response;
  const uint64_t ok = Count(Api::kSglangMatchPrefix, Outcome::kOk);
  SglangStatus status = indexer_->MatchPrefix(PrefixRequest(Wire(3)), &response);
  ASSERT_TRUE(status.ok()) << status.message;
  api_->compat().Record(Api::kSglangMatchPrefix, status.outcome);
  EXPECT_EQ(Count(Api::kSglangMatchPrefix, Outcome::kOk), ok + 1);
  EXPECT_EQ(Text(response),
            "best 3 read 3 [http://10.0.0.1:30000 101 3] [http://10.0.0.2:30000 202:dp1 3] "
            "[http://10.0.0.3:30000 303 3] [http://10.0.0.4:30000 404 1]");
  // The hashes are their sfixed64: some are negative on the wire.
  EXPECT_TRUE(Wire(3)[0] < 0 || Wire(3)[1] < 0 || Wire(3)[2] < 0);

  // max_blocks: only the leading blocks count (and are read).
  ASSERT_TRUE(indexer_->MatchPrefix(PrefixRequest(Wire(3), 2), &response).ok());
  EXPECT_EQ(Text(response),
            "best 2 read 2 [http://10.0.0.1:30000 101 2] [http://10.0.0.2:30000 202:dp1 2] "
            "[http://10.0.0.3:30000 303 2] [http://10.0.0.4:30000 404 1]");
  // The prefix stops at the first block a worker lacks (an unknown hash).
  ASSERT_TRUE(indexer_->MatchPrefix(PrefixRequest({Wire(3)[0], 42, Wire(3)[2]}), &response).ok());
  EXPECT_EQ(Text(response),
            "best 1 read 3 [http://10.0.0.1:30000 101 1] [http://10.0.0.2:30000 202 1] "
            "[http://10.0.0.3:30000 303 1] [http://10.0.0.4:30000 404 1]");
  // Unknown hashes: no match, still an answer.
  ASSERT_TRUE(indexer_->MatchPrefix(PrefixRequest({42, -42}), &response).ok());
  EXPECT_EQ(Text(response), "best 0 read 2");
}

// Every row equals the /v1/match row of the same prefix (the one lookup).
TEST_F(SglangIndexerTest, PrefixEqualsLookupForEveryPrefix) {
  for (size_t k = 1; k <= seq_.size(); ++k) {
    query::MatchRequest request;
    request.model = "m";
    request.has_seq_hashes = true;
    request.seq_hashes.assign(seq_.begin(), seq_.begin() + static_cast<long>(k));
    auto result = query::Lookup(api_->context(), request, consume::Endpoint::kQuery);
    ASSERT_TRUE(result.ok());
    // Per address the best `longest` of its rows, derived here.
    std::map<std::string, uint32_t> want;
    for (const index::WorkerMatch& w : result->workers) {
      if (Address(w.source).empty()) continue;
      want[Address(w.source)] = std::max(want[Address(w.source)], w.longest);
    }
    ASSERT_FALSE(want.empty());
    pb::MatchExternalKvPrefixResponse response;
    ASSERT_TRUE(indexer_->MatchPrefix(PrefixRequest(Wire(k)), &response).ok());
    std::map<std::string, uint32_t> got;
    uint32_t best = 0;
    for (const auto& m : response.matches()) {
      got[m.worker_address()] = m.matched_prefix_blocks();
      best = std::max(best, m.matched_prefix_blocks());
    }
    EXPECT_EQ(got, want) << k;
    EXPECT_EQ(response.best_prefix_blocks(), best);
    EXPECT_EQ(response.blocks_read(), k);
  }
}

// MatchExternalKv: per worker and tier the hashes it holds, each in its
// fastest tier (device HBM, host DRAM, disk SSD; external has no SGLang tier).
TEST_F(SglangIndexerTest, MatchGoldenAndHitCounts) {
  pb::MatchExternalKvRequest request;
  const std::vector<int64_t> wire = Wire(3);
  request.mutable_hashes()->Add(wire.begin(), wire.end());
  request.add_hashes(77);  // unknown
  pb::MatchExternalKvResponse response;
  ASSERT_TRUE(indexer_->Match(request, &response).ok());
  EXPECT_EQ(Text(response, seq_),
            "[101 http://10.0.0.1:30000 TIER_HBM:012][202 http://10.0.0.2:30000 TIER_DRAM:0]"
            "[202:dp1 http://10.0.0.2:30000 TIER_HBM:0 TIER_DRAM:1 TIER_SSD:2]"
            "[303 http://10.0.0.3:30000 TIER_HBM:02 TIER_DRAM:1][w-x  TIER_HBM:0]");

  // Hits: only count_as_hit requests count, and only matched hashes.
  pb::GetExternalKvHitCountsRequest hits;
  hits.add_hashes(wire[0]);
  hits.add_hashes(77);
  pb::GetExternalKvHitCountsResponse counts;
  ASSERT_TRUE(indexer_->HitCounts(hits, &counts).ok());
  EXPECT_EQ(counts.entries_size(), 0);
  request.set_count_as_hit(true);
  ASSERT_TRUE(indexer_->Match(request, &response).ok());
  ASSERT_TRUE(indexer_->Match(request, &response).ok());
  ASSERT_TRUE(indexer_->HitCounts(hits, &counts).ok());
  ASSERT_EQ(counts.entries_size(), 1);
  EXPECT_EQ(counts.entries(0).hash(), wire[0]);
  EXPECT_EQ(counts.entries(0).hit_count_total(), 2u);
}

// SGLang's limits and status codes, each with its counted reason.
TEST_F(SglangIndexerTest, Errors) {
  pb::MatchExternalKvPrefixResponse prefix;
  SglangStatus s = indexer_->MatchPrefix(PrefixRequest({}), &prefix);
  EXPECT_EQ(s.code, SglangCode::kInvalidArgument);
  EXPECT_EQ(s.outcome, Outcome::kMissingField);
  EXPECT_EQ(s.message, "hashes must not be empty");

  pb::MatchExternalKvRequest match;
  pb::MatchExternalKvResponse matched;
  for (size_t i = 0; i <= kSglangMaxHashes; ++i) match.add_hashes(static_cast<int64_t>(i));
  s = indexer_->Match(match, &matched);
  EXPECT_EQ(s.code, SglangCode::kResourceExhausted);
  EXPECT_EQ(s.outcome, Outcome::kTooManyHashes);
  EXPECT_EQ(s.message, "request contains 16385 hashes; maximum is 16384");
  pb::GetExternalKvHitCountsRequest hits;
  hits.mutable_hashes()->CopyFrom(match.hashes());
  pb::GetExternalKvHitCountsResponse counts;
  EXPECT_EQ(indexer_->HitCounts(hits, &counts).code, SglangCode::kResourceExhausted);
  // The prefix query has no hash ceiling (their validate_hashes).
  std::vector<int64_t> many = Wire(3);
  many.resize(kSglangMaxHashes + 10, 5);
  EXPECT_TRUE(indexer_->MatchPrefix(PrefixRequest(many), &prefix).ok());
  EXPECT_EQ(prefix.best_prefix_blocks(), 3u);
  EXPECT_EQ(prefix.blocks_read(), kSglangMaxHashes + 10);

  // Several models and none chosen: FAILED_PRECONDITION naming them.
  Publish({Stored("other", "101", 0, Tier::kDevice, {seq_[0]})});
  s = indexer_->MatchPrefix(PrefixRequest(Wire(1)), &prefix);
  EXPECT_EQ(s.code, SglangCode::kFailedPrecondition);
  EXPECT_EQ(s.outcome, Outcome::kModelAmbiguous);
  EXPECT_NE(s.message.find("(m, other)"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("--sglang-model"), std::string::npos) << s.message;
  // --sglang-model picks one.
  auto chosen = MakeIndexer("other");
  ASSERT_TRUE(chosen->MatchPrefix(PrefixRequest(Wire(3)), &prefix).ok());
  EXPECT_EQ(Text(prefix), "best 1 read 3 [http://10.0.0.1:30000 101 1]");
  // A model the router does not know has nothing cached: empty, counted.
  auto unknown = MakeIndexer("nope");
  s = unknown->MatchPrefix(PrefixRequest(Wire(3)), &prefix);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.outcome, Outcome::kUnknownModel);
  EXPECT_EQ(prefix.matches_size(), 0);

  pb::ApplyExternalKvBatchRequest batch;
  batch.set_worker_id("w");
  s = indexer_->ApplyBatch(batch);
  EXPECT_EQ(s.code, SglangCode::kUnimplemented);
  EXPECT_EQ(s.outcome, Outcome::kUnimplemented);
  EXPECT_NE(s.message.find("--source"), std::string::npos) << s.message;
}

// The same answers through the real gRPC server and their generated client
// types; status codes on the wire; every answer counted.
TEST_F(SglangIndexerTest, GrpcServer) {
  SglangServer server({.listen = "127.0.0.1:0"}, indexer_.get(), &api_->compat());
  ASSERT_TRUE(server.Start().ok());
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = pb::KVIndexer::NewStub(channel);

  const uint64_t ok = Count(Api::kSglangMatchPrefix, Outcome::kOk);
  grpc::ClientContext c1;
  pb::MatchExternalKvPrefixResponse response;
  grpc::Status status = stub->MatchExternalKvPrefix(&c1, PrefixRequest(Wire(3)), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  pb::MatchExternalKvPrefixResponse direct;
  ASSERT_TRUE(indexer_->MatchPrefix(PrefixRequest(Wire(3)), &direct).ok());
  EXPECT_EQ(Text(response), Text(direct));
  EXPECT_EQ(response.matches_size(), 4);
  EXPECT_EQ(Count(Api::kSglangMatchPrefix, Outcome::kOk), ok + 1);

  const uint64_t empty = Count(Api::kSglangMatchPrefix, Outcome::kMissingField);
  grpc::ClientContext c2;
  status = stub->MatchExternalKvPrefix(&c2, PrefixRequest({}), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "hashes must not be empty");
  EXPECT_EQ(Count(Api::kSglangMatchPrefix, Outcome::kMissingField), empty + 1);

  pb::MatchExternalKvRequest match;
  for (size_t i = 0; i <= kSglangMaxHashes; ++i) match.add_hashes(static_cast<int64_t>(i));
  pb::MatchExternalKvResponse matched;
  grpc::ClientContext c3;
  status = stub->MatchExternalKv(&c3, match, &matched);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Count(Api::kSglangMatch, Outcome::kTooManyHashes), 1u);

  pb::ApplyExternalKvBatchRequest batch;
  batch.set_worker_id("w");
  pb::ApplyExternalKvBatchResponse applied;
  grpc::ClientContext c4;
  status = stub->ApplyExternalKvBatch(&c4, batch, &applied);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Count(Api::kSglangApplyBatch, Outcome::kUnimplemented), 1u);
  server.Stop();
}

}  // namespace
}  // namespace kvindex::compat
