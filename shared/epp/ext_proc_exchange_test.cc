// ExtProcExchange without gRPC: the answers a message sequence calls for,
// with the bodies moved rather than copied where they can be; and the
// WorkerPool the reactor hands blocking token sources to.
#include "shared/epp/ext_proc_exchange.h"

#include <gtest/gtest.h>

#include <atomic>

#include "shared/epp/worker_pool.h"
#include "shared/index/kv_index.h"

namespace kvindex::epp {
namespace {

namespace pb = envoy::service::ext_proc::v3;

class ExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Endpoint e;
    e.address = "10.0.0.1:8000";
    e.source.worker = "w0";
    e.model = "m";
    endpoints_.SetStatic({e});
    picker_ = std::make_unique<Picker>(PickerConfig{}, &index_, &endpoints_, nullptr);
    auto chain = BuildTokenChain({});
    ASSERT_TRUE(chain.ok());
    tokens_ = std::move(*chain);
  }
  static pb::ProcessingRequest Headers() {
    pb::ProcessingRequest r;
    auto* h = r.mutable_request_headers()->mutable_headers()->add_headers();
    h->set_key(":path");
    h->set_raw_value("/v1/completions");
    return r;
  }
  static pb::ProcessingRequest Body(std::string body, bool end) {
    pb::ProcessingRequest r;
    r.mutable_request_body()->set_body(std::move(body));
    r.mutable_request_body()->set_end_of_stream(end);
    return r;
  }
  static std::string Echoed(const std::vector<pb::ProcessingResponse>& out, size_t from,
                            bool* ended) {
    std::string all;
    for (size_t i = from; i < out.size(); ++i) {
      const auto& chunk = out[i].request_body().response().body_mutation().streamed_response();
      EXPECT_LE(chunk.body().size(), kMaxBodyChunkBytes);
      EXPECT_FALSE(*ended) << "a chunk after end_of_stream";
      all += chunk.body();
      *ended = chunk.end_of_stream();
    }
    return all;
  }

  index::KvIndex index_;
  EndpointTable endpoints_;
  std::unique_ptr<Picker> picker_;
  std::unique_ptr<TokenChain> tokens_;
  ServiceOptions options_;
  ServiceCounters counters_;
};

TEST_F(ExchangeTest, OneMessageBodyIsPickedThenEchoedWhole) {
  const std::string body = R"({"model":"m","prompt":[1,2,3,4,5,6,7,8],"max_tokens":1})";
  std::vector<pb::ProcessingResponse> out;
  {
    ExtProcExchange exchange(&options_, picker_.get(), tokens_.get(), &counters_);
    pb::ProcessingRequest headers = Headers();
    exchange.Handle(&headers, &out);
    EXPECT_TRUE(out.empty()) << "the headers' answer waits for the body";
    pb::ProcessingRequest request = Body(body, true);
    exchange.Handle(&request, &out);
    ASSERT_EQ(out.size(), 2u);
    const auto& set = out[0].request_headers().response().header_mutation().set_headers();
    ASSERT_EQ(set.size(), 1);
    EXPECT_EQ(set[0].header().key(), kDestinationHeader);
    EXPECT_EQ(set[0].header().raw_value(), "10.0.0.1:8000");
    EXPECT_TRUE(out[0].request_headers().response().clear_route_cache());
    bool ended = false;
    EXPECT_EQ(Echoed(out, 1, &ended), body);
    EXPECT_TRUE(ended);
    EXPECT_EQ(counters_.streams_open.load(), 1);
    EXPECT_EQ(picker_->InFlight("10.0.0.1:8000"), 1);
  }
  EXPECT_EQ(counters_.streams_open.load(), 0);
  EXPECT_EQ(counters_.streams_ended[ServiceCounters::kComplete].load(), 1u);
  EXPECT_EQ(counters_.picks_prefix.load() + counters_.picks_load_only.load(), 1u);
  EXPECT_EQ(picker_->InFlight("10.0.0.1:8000"), 0) << "the pick is released at the end";
}

// A second request_headers after the pick (a protocol violation Envoy does
// not commit, but a stream may carry) must not pick again: the first pick
// would stay in flight forever. Found while writing the ext_proc fuzzer.
TEST_F(ExchangeTest, RepeatedHeadersDoNotLeakAPick) {
  for (int round = 0; round < 3; ++round) {
    std::vector<pb::ProcessingResponse> out;
    {
      ExtProcExchange exchange(&options_, picker_.get(), tokens_.get(), &counters_);
      for (int i = 0; i < 3; ++i) {
        pb::ProcessingRequest headers = Headers();
        headers.mutable_request_headers()->set_end_of_stream(true);
        exchange.Handle(&headers, &out);
      }
      EXPECT_EQ(picker_->InFlight("10.0.0.1:8000"), 1) << "one pick, round " << round;
    }
    EXPECT_EQ(picker_->InFlight("10.0.0.1:8000"), 0) << "released, round " << round;
    for (const auto& answer : out) EXPECT_FALSE(answer.has_immediate_response());
  }
}

// An oversize body (fail open) is picked for at once, load-only; when that
// pick fails (503: the subset hint leaves no endpoint) the exchange is
// finished and must not hold the body, past max_body_bytes, until the
// stream ends. Found by tests/fuzz/ext_proc_fuzz (bounded buffering).
TEST_F(ExchangeTest, RefusedOversizeBodyIsNotKept) {
  options_.max_body_bytes = 64;
  std::vector<pb::ProcessingResponse> out;
  ExtProcExchange exchange(&options_, picker_.get(), tokens_.get(), &counters_);
  pb::ProcessingRequest headers = Headers();
  auto* hint = headers.mutable_metadata_context()->mutable_filter_metadata();
  (*(*hint)[kSubsetNamespace].mutable_fields())[kSubsetKey].set_string_value("10.9.9.9:1");
  exchange.Handle(&headers, &out);
  pb::ProcessingRequest body = Body(std::string(100, 'x'), false);
  exchange.Handle(&body, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].immediate_response().status().code(), envoy::type::v3::ServiceUnavailable);
  EXPECT_TRUE(exchange.finished());
  EXPECT_EQ(exchange.buffered_bytes(), 0u);
}

// An oversize body (fail open) passes through chunk by chunk after the
// load-only pick, until the chunk that ends it; a body chunk after that end
// is ignored like any other body after the pick, not echoed past the end
// (Envoy would get a body chunk after end_of_stream). Found by
// tests/fuzz/ext_proc_fuzz.
TEST_F(ExchangeTest, OversizePassThroughEndsWithTheBody) {
  options_.max_body_bytes = 64;
  std::vector<pb::ProcessingResponse> out;
  ExtProcExchange exchange(&options_, picker_.get(), tokens_.get(), &counters_);
  pb::ProcessingRequest headers = Headers();
  exchange.Handle(&headers, &out);
  pb::ProcessingRequest first = Body(std::string(100, 'x'), false);
  exchange.Handle(&first, &out);
  ASSERT_EQ(out.size(), 2u) << "the pick and the body so far";
  pb::ProcessingRequest last = Body("tail", true);
  exchange.Handle(&last, &out);
  ASSERT_EQ(out.size(), 3u);
  bool ended = false;
  EXPECT_EQ(Echoed(out, 1, &ended), std::string(100, 'x') + "tail");
  EXPECT_TRUE(ended);
  pb::ProcessingRequest extra = Body("extra", true);
  exchange.Handle(&extra, &out);
  EXPECT_EQ(out.size(), 3u) << "a body chunk after the end is not echoed";
}

TEST_F(ExchangeTest, BodyInSeveralMessagesIsEchoedInChunksOfAtMost62000Bytes) {
  std::string body = R"({"model":"m","prompt":")" + std::string(150'000, 'x') + R"("})";
  std::vector<pb::ProcessingResponse> out;
  ExtProcExchange exchange(&options_, picker_.get(), tokens_.get(), &counters_);
  pb::ProcessingRequest headers = Headers();
  exchange.Handle(&headers, &out);
  for (size_t offset = 0; offset < body.size(); offset += 65'536) {
    const bool last = offset + 65'536 >= body.size();
    pb::ProcessingRequest request = Body(body.substr(offset, 65'536), last);
    exchange.Handle(&request, &out);
    if (!last) {
      EXPECT_TRUE(out.empty());
    }
  }
  ASSERT_EQ(out.size(), 1 + (body.size() + kMaxBodyChunkBytes - 1) / kMaxBodyChunkBytes);
  EXPECT_TRUE(out[0].has_request_headers());
  bool ended = false;
  EXPECT_EQ(Echoed(out, 1, &ended), body);
  EXPECT_TRUE(ended);
  EXPECT_EQ(counters_.picks_load_only.load(), 1u) << "a text prompt without a tokenizer";
}

TEST_F(ExchangeTest, StreamedResponseBodyPassesThroughUnchanged) {
  std::vector<pb::ProcessingResponse> out;
  ExtProcExchange exchange(&options_, picker_.get(), tokens_.get(), &counters_);
  pb::ProcessingRequest request;
  request.mutable_response_body()->set_body("data: {\"x\":1}\n\n");
  request.mutable_response_body()->set_end_of_stream(true);
  exchange.Handle(&request, &out);
  ASSERT_EQ(out.size(), 1u);
  const auto& chunk = out[0].response_body().response().body_mutation().streamed_response();
  EXPECT_EQ(chunk.body(), "data: {\"x\":1}\n\n");
  EXPECT_TRUE(chunk.end_of_stream());
}

TEST(WorkerPoolTest, RunsEveryPostedTaskBeforeItIsDestroyed) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(3);
    for (int i = 0; i < 100; ++i) pool.Post([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace kvindex::epp
