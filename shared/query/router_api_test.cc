#include "shared/query/router_api.h"
#include "shared/consume/testing/wait_applied.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "shared/consume/in_process_log_reader.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/http/client.h"
#include "shared/index/kv_index.h"
#include "shared/query/json_writer.h"

namespace kvindex::query {
namespace {

using nlohmann::json;

class RouterApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    probe_.Bind(&index_, [this] { return loop_.Pending(); });
    ASSERT_TRUE(loop_.Start().ok());

    // Sequence hashes of tokens 1..12 in blocks of 4.
    std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    std::vector<uint64_t> local;
    hashing::ComputeLocalHashes(tokens, 4, hashing::LocalHashSeed("", ""), &local);
    hashing::ComputeSequenceHashes(local, std::nullopt, &seq_);
    ASSERT_EQ(seq_[1], 4945711292740353085ull);

    std::vector<PlacementEvent> events;
    events.push_back(Stored("w0", 0, Tier::kDevice, {seq_[0], seq_[1], seq_[2]}));
    events.push_back(Stored("w1", 1, Tier::kDevice, {seq_[0]}));
    events.push_back(Stored("w1", 1, Tier::kHost, {seq_[0], seq_[1]}));
    ASSERT_TRUE(sink_.Publish(events).ok());
    ASSERT_TRUE(consume::testing::WaitUntilApplied(loop_));

    // Model m's tokenizer: byte-level BPE, letter a..m -> token 1..13.
    tokenizer_dir_ = std::filesystem::temp_directory_path() /
                     ("kvindex-router-api-tokenizer-" + std::to_string(::getpid()));
    std::filesystem::create_directories(tokenizer_dir_);
    json vocab = json::object();
    for (int i = 0; i < 13; ++i) vocab[std::string(1, static_cast<char>('a' + i))] = i + 1;
    json spec = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
                 {"pre_tokenizer",
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
                 {"added_tokens", json::array()}};
    std::ofstream(tokenizer_dir_ / "tokenizer.json") << spec.dump();
    std::ofstream(tokenizer_dir_ / "tokenizer_config.json")
        << R"({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %})"
           R"({% if add_generation_prompt %}m{% endif %}"})";
    auto tokenizers = tokenize::TokenizerRegistry::Load({"m=" + tokenizer_dir_.string()});
    ASSERT_TRUE(tokenizers.ok()) << tokenizers.status();
    tokenizers_ = std::move(*tokenizers);

    ApiContext context;
    context.index = &index_;
    context.apply = &loop_;
    context.probe = &probe_;
    context.registry = registry_.get();
    context.configured_models = {{"m", 4}, {"warming", 4}};
    context.tokenizers = tokenizers_.get();
    // Predict on route's entries, as the router wires the picker's cache in.
    context.speculative.any = [this] { return !speculative_.empty(); };
    context.speculative.prefixes = [this](std::string_view model, std::span<const uint64_t> seq,
                                          std::vector<SpeculativeRow>* rows) {
      EXPECT_EQ(model, "m");
      asked_.assign(seq.begin(), seq.end());
      *rows = speculative_;
    };
    api_ = std::make_unique<RouterApi>(ApiOptions{}, context);
    http::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.threads = 4;
    options.max_body_bytes = 4096;
    options.bearer_token = token_;
    server_ = std::make_unique<http::Server>(options);
    api_->Register(*server_);
    ASSERT_TRUE(server_->Start().ok());
  }

  void TearDown() override { std::filesystem::remove_all(tokenizer_dir_); }

  PlacementEvent Stored(std::string worker, uint32_t rank, Tier tier,
                        std::vector<uint64_t> hashes) {
    PlacementEvent e;
    e.kind = PlacementKind::kStored;
    e.model = "m";
    e.source = {std::move(worker), rank};
    e.agent = "node-a";
    e.timestamp_ns = 1'700'000'000'000'000'000ull;
    e.tier = tier;
    e.block_size = 4;
    e.block_hashes = std::move(hashes);
    return e;
  }

  http::ClientResponse Call(std::string method, std::string path, std::string body = "",
                            bool auth = true) {
    http::ClientRequest request;
    request.method = std::move(method);
    request.url.host = "127.0.0.1";
    request.url.port = server_->port();
    request.path = std::move(path);
    request.body = std::move(body);
    if (auth && !token_.empty()) request.headers.emplace_back("Authorization", "Bearer " + token_);
    auto response = http::Fetch(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : http::ClientResponse{};
  }

  std::string token_ = "t0ken";
  std::vector<SpeculativeRow> speculative_;  // what the hook answers
  std::vector<uint64_t> asked_;              // the sequence hashes it was asked
  InProcessSink sink_;
  consume::InProcessLogReader reader_{&sink_};
  index::KvIndex index_;
  consume::RouterProbe probe_;
  consume::ApplyLoop loop_{&reader_, &index_, &probe_, {}};
  std::shared_ptr<prometheus::Registry> registry_;
  std::filesystem::path tokenizer_dir_;
  std::unique_ptr<tokenize::TokenizerRegistry> tokenizers_;
  std::unique_ptr<RouterApi> api_;
  std::unique_ptr<http::Server> server_;
  std::vector<uint64_t> seq_;
};

// WriteMatchResponse writes through a pointer into a string sized for the
// longest answer: the same bytes as JsonWriter, appended after what the
// string held, for names that need escaping and for the largest numbers.
TEST(WriteMatchResponseTest, SameBytesAsJsonWriter) {
  index::MatchResult result;
  result.blocks = UINT32_MAX;
  result.applied_seq = UINT64_MAX;
  for (const std::string name : {"w0", "", "quote\"back\\slash\n\x01tab\t", "\xc3\xa9t\xc3\xa9"}) {
    index::WorkerMatch m;
    m.source = {name, UINT32_MAX};
    m.longest = m.device = m.host = m.disk = m.external = m.device_prefix = UINT32_MAX;
    result.workers.push_back(m);
  }
  for (size_t workers : {size_t{0}, size_t{1}, result.workers.size()}) {
    index::MatchResult r = result;
    r.workers.resize(workers);
    std::string expected = "prefix";
    JsonWriter w(&expected);
    w.BeginObject();
    w.Field("model", std::string_view("m\"\\"));
    w.Field("blocks", r.blocks);
    w.Field("applied_seq", r.applied_seq);
    w.Key("workers");
    w.BeginArray();
    for (const index::WorkerMatch& m : r.workers) {
      w.BeginObject();
      w.Field("worker", m.source.worker);
      w.Field("dp_rank", m.source.dp_rank);
      w.Field("longest", m.longest);
      w.Field("device", m.device);
      w.Field("host", m.host);
      w.Field("disk", m.disk);
      w.Field("external", m.external);
      w.Field("device_prefix", m.device_prefix);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    std::string got = "prefix";
    WriteMatchResponse("m\"\\", r, &got);
    EXPECT_EQ(got, expected) << workers << " workers";
    // With speculative rows: the same object plus "speculative".
    std::vector<SpeculativeRow> rows;
    for (const index::WorkerMatch& m : r.workers) rows.push_back({m.source, UINT32_MAX});
    if (rows.empty()) continue;
    expected.pop_back();  // the closing brace
    w.Key("speculative");
    w.BeginArray();
    for (const SpeculativeRow& row : rows) {
      w.BeginObject();
      w.Field("worker", row.source.worker);
      w.Field("dp_rank", row.source.dp_rank);
      w.Field("blocks", row.blocks);
      w.EndObject();
    }
    w.EndArray();
    expected.push_back('}');
    got = "prefix";
    WriteMatchResponse("m\"\\", r, &got, -1, rows);
    EXPECT_EQ(got, expected) << workers << " workers, speculative";
  }
}

TEST_F(RouterApiTest, MatchTokens) {
  auto r = Call("POST", "/v1/match", R"({"model":"m","tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["blocks"], 3);
  EXPECT_EQ(j["applied_seq"], 3);
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_EQ(j["workers"][0],
            json::parse(R"({"worker":"w0","dp_rank":0,"longest":3,"device":3,"host":0,"disk":0,
                            "external":0,"device_prefix":3})"));
  EXPECT_EQ(j["workers"][1],
            json::parse(R"({"worker":"w1","dp_rank":1,"longest":2,"device":1,"host":1,"disk":0,
                            "external":0,"device_prefix":1})"));
}

// /v1/match's "speculative": absent while the picker holds no entry (the
// bytes as before), else the rows of the hook, sorted, asked with the same
// sequence hashes the index matched (tokens or local hashes, max_blocks);
// "workers" unchanged.
TEST_F(RouterApiTest, MatchSpeculativeApart) {
  const std::string tokens = R"({"model":"m","tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13]})";
  auto before = Call("POST", "/v1/match", tokens);
  ASSERT_EQ(before.status, 200) << before.body;
  EXPECT_EQ(before.body.find("speculative"), std::string::npos) << before.body;
  EXPECT_TRUE(asked_.empty());

  speculative_ = {{{"w0", 0}, 1}, {{"w2", 0}, 3}, {{"w1", 1}, 3}};
  auto r = Call("POST", "/v1/match", tokens);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(asked_, seq_);
  json j = json::parse(r.body);
  EXPECT_EQ(j["workers"], json::parse(before.body)["workers"]);
  EXPECT_EQ(j["speculative"], json::parse(R"([{"worker":"w1","dp_rank":1,"blocks":3},
                                               {"worker":"w2","dp_rank":0,"blocks":3},
                                               {"worker":"w0","dp_rank":0,"blocks":1}])"));
  EXPECT_EQ(j["blocks"], 3);

  r = Call("POST", "/v1/match", R"({"model":"m","tokens":[1,2,3,4,5,6,7,8,9],"max_blocks":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(asked_, std::vector<uint64_t>(seq_.begin(), seq_.begin() + 1));
  EXPECT_EQ(json::parse(r.body)["blocks"], 2);
  EXPECT_EQ(json::parse(r.body)["workers"][0]["longest"], 1);

  std::vector<uint64_t> local;
  hashing::ComputeLocalHashes(std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}, 4,
                              hashing::LocalHashSeed("", ""), &local);
  r = Call("POST", "/v1/match",
           R"({"model":"m","local_hashes":[)" + std::to_string(local[0]) + "," +
               std::to_string(local[1]) + "]}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(asked_, std::vector<uint64_t>(seq_.begin(), seq_.begin() + 2));
  EXPECT_EQ(json::parse(r.body)["speculative"].size(), 3u);
  EXPECT_EQ(json::parse(r.body)["blocks"], 2);

  // The hook holds entries, none for this prompt: no field.
  speculative_ = {};
  r = Call("POST", "/v1/match", tokens);
  EXPECT_EQ(r.body, before.body);
}

TEST_F(RouterApiTest, MatchText) {
  // "abcdefghijklm" -> tokens 1..13 -> the same answer as MatchTokens, plus the count.
  auto r = Call("POST", "/v1/match", R"({"model":"m","text":"abcdefghijklm"})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["blocks"], 3);
  EXPECT_EQ(j["tokens"], 13);
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_EQ(j["workers"][0]["longest"], 3);
  // "abcdx": x is not in the vocabulary (dropped, as HF does): 4 tokens, 1 block.
  r = Call("POST", "/v1/match", R"({"model":"m","text":"abcd\u0078"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"], 4);
  // The token form does not carry the count.
  r = Call("POST", "/v1/match", R"({"model":"m","tokens":[1,2,3,4]})");
  EXPECT_FALSE(json::parse(r.body).contains("tokens"));

  auto none = Call("POST", "/v1/match", R"({"model":"warming","text":"abcd"})");
  EXPECT_EQ(none.status, 400);
  EXPECT_NE(none.body.find("no tokenizer for model 'warming'"), std::string::npos) << none.body;
  auto both = Call("POST", "/v1/match", R"({"model":"m","text":"abcd","tokens":[1]})");
  EXPECT_EQ(both.status, 400);
  auto not_string = Call("POST", "/v1/match", R"({"model":"m","text":5})");
  EXPECT_EQ(not_string.status, 400);
  EXPECT_NE(not_string.body.find("'text' must be a string"), std::string::npos);
}

TEST_F(RouterApiTest, MatchMessages) {
  // Parts joined as vLLM does ("\n" is not in the vocabulary: dropped), then
  // the generation prompt "m": tokens 1..13, as MatchTokens.
  auto r = Call("POST", "/v1/match",
                R"({"model":"m","messages":[{"role":"user","content":[)"
                R"({"type":"text","text":"abcdef"},"ghijkl"]}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["blocks"], 3);
  EXPECT_EQ(j["tokens"], 13);
  EXPECT_EQ(j["workers"][0]["longest"], 3);
  r = Call(
      "POST", "/v1/match",
      R"({"model":"m","add_generation_prompt":false,"messages":[{"role":"user","content":"abcd"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"], 4);

  auto image = Call("POST", "/v1/match",
                    R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url",)"
                    R"("image_url":{"url":"x"}}]}]})");
  EXPECT_EQ(image.status, 400);
  EXPECT_NE(image.body.find("render endpoint"), std::string::npos) << image.body;
  auto not_array = Call("POST", "/v1/match", R"({"model":"m","messages":{}})");
  EXPECT_EQ(not_array.status, 400);
  EXPECT_NE(not_array.body.find("'messages' must be an array"), std::string::npos);
  auto both = Call("POST", "/v1/match", R"({"model":"m","messages":[],"text":"a"})");
  EXPECT_EQ(both.status, 400);
}

TEST_F(RouterApiTest, MatchLocalHashes) {
  auto r = Call("POST", "/v1/match",
                R"({"model":"m","local_hashes":[14643705804678351452, 16777012769546811212]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["blocks"], 2);
  EXPECT_EQ(j["workers"][0]["longest"], 2);
}

TEST_F(RouterApiTest, ConfiguredModelWithoutEventsMatchesNothing) {
  auto r = Call("POST", "/v1/match", R"({"model":"warming","tokens":[1,2,3,4,5,6,7,8,9]})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["blocks"], 2);
  EXPECT_EQ(j["applied_seq"], 3);
  EXPECT_TRUE(j["workers"].empty());
  auto q = Call("POST", "/query", R"({"model":"warming","token_ids":[1,2,3,4],"block_size":4})");
  ASSERT_EQ(q.status, 200) << q.body;
  EXPECT_EQ(json::parse(q.body), json::parse(R"({"default":{}})"));
}

TEST_F(RouterApiTest, ErrorPaths) {
  auto unknown = Call("POST", "/v1/match", R"({"model":"nope","tokens":[1,2,3,4]})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("nope"), std::string::npos);
  auto bad = Call("POST", "/v1/match", R"({"model":"m","tokens":[1,2,)");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("invalid JSON"), std::string::npos);
  EXPECT_EQ(Call("GET", "/v1/match").status, 405);
  EXPECT_EQ(Call("POST", "/v1/state").status, 405);
  EXPECT_EQ(Call("POST", "/v1/match", std::string(5000, ' ')).status, 413);
  EXPECT_EQ(Call("POST", "/v1/match", R"({"model":"m","tokens":[1]})", false).status, 401);
  EXPECT_EQ(Call("GET", "/v1/state", "", false).status, 401);
  EXPECT_EQ(Call("GET", "/healthz", "", false).status, 200);
  EXPECT_EQ(Call("GET", "/readyz", "", false).status, 200);
  EXPECT_EQ(Call("GET", "/metrics", "", false).status, 200);
}

TEST_F(RouterApiTest, StateWorkersQueryMetrics) {
  auto state = Call("GET", "/v1/state");
  ASSERT_EQ(state.status, 200);
  json s = json::parse(state.body);
  EXPECT_EQ(s["applied_seq"], 3);
  EXPECT_EQ(s["entries"]["device"], 4);
  EXPECT_EQ(s["entries"]["host"], 2);
  EXPECT_EQ(s["sources"], 2);
  EXPECT_EQ(s["ready"], true);
  EXPECT_EQ(s["digest"].get<std::string>().size(), 16u);

  auto workers = Call("GET", "/v1/workers");
  ASSERT_EQ(workers.status, 200);
  json w = json::parse(workers.body);
  ASSERT_EQ(w["workers"].size(), 2u);
  EXPECT_EQ(w["workers"][1]["worker"], "w1");
  EXPECT_EQ(w["workers"][1]["dp_rank"], 1);
  EXPECT_EQ(w["workers"][1]["agent"], "node-a");
  EXPECT_EQ(w["workers"][1]["entries"]["host"], 2);
  EXPECT_EQ(w["workers"][1]["last_event_unix_ms"], 1'700'000'000'000ull);

  auto query =
      Call("POST", "/query", R"({"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12],"model_name":"m"})");
  ASSERT_EQ(query.status, 200) << query.body;
  json q = json::parse(query.body)["default"];
  EXPECT_EQ(q["w0"]["longest_matched"], 12);
  EXPECT_EQ(q["w0"]["GPU"], 12);
  EXPECT_EQ(q["w1"]["longest_matched"], 8);
  EXPECT_EQ(q["w1"]["GPU"], 4);
  EXPECT_EQ(q["w1"]["CPU"], 8);
  EXPECT_EQ(q["w1"]["DISK"], 8);
  EXPECT_EQ(q["w1"]["DP"]["1"], 8);

  auto metrics = Call("GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(
      metrics.body.find(
          R"(kvindex_router_events_applied_total{event_type="stored",status="applied",tier="host"} 1)"),
      std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find(R"(kvindex_router_index_entries{model="m",tier="device"} 4)"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("kvindex_router_lookup_duration_seconds_bucket"), std::string::npos);
}

// A source whose agent started (its start-up "cleared" applied, stamped
// with the agent's clock) but whose engine has sent nothing: /v1/workers
// lists it with its model and no last event (docs/api.md: null before any),
// and /v1/state lists every model the router knows: held in the index
// ("m"), configured by --source with no event yet ("warming"), or only seen
// in an event ("fresh").
TEST_F(RouterApiTest, SourceWithoutEngineEventsAndKnownModels) {
  PlacementEvent startup_clear;
  startup_clear.kind = PlacementKind::kCleared;
  startup_clear.model = "fresh";
  startup_clear.source = {"w2", 0};
  startup_clear.agent = "node-a";
  startup_clear.timestamp_ns = 1'700'000'001'000'000'000ull;
  ASSERT_TRUE(sink_.Publish(std::vector<PlacementEvent>{startup_clear}).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loop_.position() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(loop_.position(), 4u);

  ApiContext context;
  context.index = &index_;
  context.apply = &loop_;
  context.configured_models = {{"m", 4}, {"warming", 4}};
  context.ingest_sources = [] {
    IngestSourceStatus w0{.worker = "w0", .dp_rank = 0, .model = "m"};
    w0.last_seq = 5;
    w0.has_seq = true;
    IngestSourceStatus w2{.worker = "w2", .dp_rank = 0, .model = "fresh"};  // no batch yet
    return std::vector<IngestSourceStatus>{w0, w2};
  };
  const RouterApi api(ApiOptions{}, context);

  http::Response state;
  api.State(http::Request{}, state);
  ASSERT_EQ(state.status, 200) << state.body;
  EXPECT_EQ(json::parse(state.body)["models"], json::parse(R"(["fresh", "m", "warming"])"))
      << state.body;

  http::Response workers;
  api.Workers(http::Request{}, workers);
  ASSERT_EQ(workers.status, 200) << workers.body;
  const json rows = json::parse(workers.body)["workers"];
  ASSERT_EQ(rows.size(), 3u) << workers.body;
  EXPECT_EQ(rows[0]["model"], "fresh");
  EXPECT_EQ(rows[0]["worker"], "w2");
  EXPECT_TRUE(rows[0]["last_event_unix_ms"].is_null()) << workers.body;
  EXPECT_TRUE(rows[0]["ingest"]["last_seq"].is_null());
  // A source whose engine delivered batches keeps its last event time.
  EXPECT_EQ(rows[1]["worker"], "w0");
  EXPECT_EQ(rows[1]["last_event_unix_ms"], 1'700'000'000'000ull);
  EXPECT_EQ(rows[1]["ingest"]["last_seq"], 5);
  // No ingest side (--nats): the applied events decide.
  EXPECT_EQ(rows[2]["worker"], "w1");
  EXPECT_EQ(rows[2]["last_event_unix_ms"], 1'700'000'000'000ull);
}

// GET /v1/checkpoint (issue #21): behind the token, run off the I/O
// threads (with one I/O thread and an export under way, /v1/match is
// answered) and one export at a time (a second meanwhile: 503 +
// Retry-After).
TEST_F(RouterApiTest, CheckpointOffTheIoThreadsOneAtATimeBehindTheToken) {
  std::atomic<bool> release{false};
  std::atomic<int> exports{0};
  ApiContext context;
  context.index = &index_;
  context.apply = &loop_;
  context.probe = &probe_;
  context.registry = registry_.get();
  context.checkpoint = [&](uint64_t* applied_seq) -> StatusOr<std::string> {
    exports.fetch_add(1);
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    *applied_seq = 7;
    return std::string("checkpoint-bytes");
  };
  RouterApi api(ApiOptions{}, context);
  http::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.threads = 1;
  options.bearer_token = token_;
  server_->Stop();
  server_ = std::make_unique<http::Server>(options);
  api.Register(*server_);
  ASSERT_TRUE(server_->Start().ok());
  EXPECT_EQ(Call("GET", "/v1/checkpoint", "", /*auth=*/false).status, 401);
  EXPECT_EQ(exports.load(), 0);
  http::ClientResponse first;
  std::thread slow([&] { first = Call("GET", "/v1/checkpoint"); });
  for (int i = 0; i < 400 && exports.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(exports.load(), 1);
  EXPECT_EQ(Call("POST", "/v1/match", R"({"model": "m", "tokens": [1, 2, 3, 4]})").status, 200);
  const http::ClientResponse second = Call("GET", "/v1/checkpoint");
  EXPECT_EQ(second.status, 503) << second.body;
  EXPECT_EQ(second.Header("retry-after"), "1");
  release.store(true);
  slow.join();
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "checkpoint-bytes");
  EXPECT_EQ(first.Header("x-kvindex-applied-seq"), "7");
  server_->Stop();
}

// An embedded router that caught up stays ready while engines publish flat
// out (events always in flight), and turns unready only past the lag bound.
TEST(RouterApiReadinessTest, CaughtUpStaysReadyUnderLoadUntilTheLagBound) {
  InProcessSink sink(8192);  // publishers block when full, as in the router
  consume::InProcessLogReader reader(&sink);
  index::KvIndex index;
  consume::ApplyLoop loop(&reader, &index, nullptr, {});
  ApiContext context;
  context.index = &index;
  context.apply = &loop;
  ApiOptions options;
  options.ready_max_lag = 20000;
  RouterApi api(options, context);
  ASSERT_TRUE(loop.Start().ok());

  std::atomic<bool> stop{false};
  auto engine = [&](std::string worker) {
    PlacementEvent stored;
    stored.kind = PlacementKind::kStored;
    stored.model = "m";
    stored.source = {std::move(worker), 0};
    stored.agent = "node-a";
    stored.block_size = 4;
    PlacementEvent removed = stored;
    removed.kind = PlacementKind::kRemoved;
    for (uint64_t h = 1; !stop.load(); ++h) {
      stored.block_hashes = {h};
      removed.block_hashes = {h};
      if (!sink.Publish(std::vector<PlacementEvent>{stored, removed}).ok()) return;
    }
  };
  std::thread a(engine, "w0"), b(engine, "w1");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!api.Ready(nullptr) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  int not_ready = 0;
  std::string reason;
  uint64_t max_pending = 0;
  for (int poll = 0; poll < 300; ++poll) {
    max_pending = std::max(max_pending, loop.Pending());
    if (!api.Ready(&reason)) ++not_ready;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const uint64_t applied_under_load = index.Stats().applied_seq;
  stop.store(true);
  sink.Close();
  a.join();
  b.join();
  EXPECT_EQ(not_ready, 0) << "of 300 polls under load (last reason: " << reason << "; at most "
                          << max_pending << " events pending)";
  EXPECT_GT(applied_under_load, 1000u) << "the engines were not publishing";

  // Past the bound (apply stopped, the log grows): not ready, saying why.
  loop.Stop();
  InProcessSink grown;
  consume::InProcessLogReader grown_reader(&grown);
  index::KvIndex grown_index;
  consume::ApplyLoop grown_loop(&grown_reader, &grown_index, nullptr, {});
  context.index = &grown_index;
  context.apply = &grown_loop;
  options.ready_max_lag = 5;
  RouterApi bounded(options, context);
  ASSERT_TRUE(grown_loop.Start().ok());
  while (!bounded.Ready(nullptr) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(bounded.Ready(nullptr));
  grown_loop.Stop();
  std::vector<PlacementEvent> events(6);
  for (PlacementEvent& event : events) {
    event.kind = PlacementKind::kCleared;
    event.model = "m";
    event.source = {"w0", 0};
  }
  ASSERT_TRUE(grown.Publish(events).ok());
  EXPECT_FALSE(bounded.Ready(&reason));
  EXPECT_NE(reason.find("lagging: 6 events pending"), std::string::npos) << reason;
  ASSERT_TRUE(grown_loop.Start().ok());  // catches up again
  while (!bounded.Ready(nullptr) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(bounded.Ready(nullptr));
  grown_loop.Stop();
}

}  // namespace
}  // namespace kvindex::query
