// The endpoint picker's callback reactor under concurrency. A real
// EppServer (gRPC on loopback) over a real KvIndex, driven by many gateway
// threads at once, each stream one of: a whole pick (the index decides it:
// checked), a client that cancels mid-body, a body past --epp-max-body-bytes
// passed through (the echo checked byte for byte), a message past gRPC's
// limit (the stream fails), headers alone then half-close; meanwhile the
// index is written, as the router's apply loop does. Then the server is
// stopped while streams are open. Every stream ends, counted, none stays
// open (streams_open back to 0: no reactor or in-flight pick leaks).
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shared/epp/epp_server.h"
#include "shared/epp/gateway_client.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/index/kv_index.h"

namespace kvindex::epp {
namespace {

namespace pb = envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

constexpr char kModel[] = "stress-model";
constexpr uint32_t kBlockSize = 16;
constexpr int kWorkers = 8;
constexpr size_t kMaxBody = 32 << 10;  // the server's --epp-max-body-bytes here

std::string Address(int w) { return "10.1.0." + std::to_string(w + 1) + ":8000"; }
std::string WorkerName(int w) { return "w" + std::to_string(w); }

// Worker w's prompt: 8 blocks of tokens only it holds (on the device).
std::vector<uint32_t> PromptOf(int w) {
  std::vector<uint32_t> tokens(8 * kBlockSize);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = 1000u * (w + 1) + i;
  return tokens;
}

std::vector<uint64_t> SequenceHashes(const std::vector<uint32_t>& tokens) {
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(tokens, kBlockSize, hashing::LocalHashSeed("", ""), &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  return seq;
}

PlacementEvent Stored(int w, std::vector<uint64_t> hashes) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = kModel;
  e.source = {WorkerName(w), 0};
  e.agent = "stress";
  e.tier = Tier::kDevice;
  e.block_size = kBlockSize;
  e.block_hashes = std::move(hashes);
  return e;
}

std::string Body(const std::vector<uint32_t>& tokens) {
  std::string body = std::string("{\"model\":\"") + kModel + "\",\"max_tokens\":1,\"prompt\":[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) body += ",";
    body += std::to_string(tokens[i]);
  }
  return body + "]}";
}

void AddHeader(pb::ProcessingRequest* request, const std::string& key, const std::string& value) {
  auto* h = request->mutable_request_headers()->mutable_headers()->add_headers();
  h->set_key(key);
  h->set_raw_value(value);
}

pb::ProcessingRequest Headers() {
  pb::ProcessingRequest headers;
  AddHeader(&headers, ":method", "POST");
  AddHeader(&headers, ":path", "/v1/completions");
  AddHeader(&headers, "content-type", "application/json");
  headers.mutable_request_headers()->set_end_of_stream(false);
  return headers;
}

pb::ProcessingRequest BodyChunk(std::string bytes, bool end) {
  pb::ProcessingRequest chunk;
  chunk.mutable_request_body()->set_body(std::move(bytes));
  chunk.mutable_request_body()->set_end_of_stream(end);
  return chunk;
}

class EppReactorStressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    uint64_t position = 1;
    for (int w = 0; w < kWorkers; ++w) {
      index_.Apply(Stored(w, SequenceHashes(PromptOf(w))), position++);
      Endpoint endpoint;
      endpoint.address = Address(w);
      endpoint.source = {WorkerName(w), 0};
      endpoint.model = kModel;
      options_.static_endpoints.push_back(endpoint);
    }
    next_position_ = position;
    options_.listen = "127.0.0.1:0";
    options_.service.max_body_bytes = kMaxBody;
    options_.service.fail_open = true;
    server_ = std::make_unique<EppServer>(options_, &index_, [] { return true; });
    ASSERT_TRUE(server_->Start().ok());
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(8 << 20);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = pb::ExternalProcessor::NewStub(channel_);
  }

  // Streams still open on the server, once the ends have been counted
  // (bounded wait: the server ends a stream after its client does).
  int64_t OpenStreamsAfterSettling() {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (server_->counters()->streams_open.load() != 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return server_->counters()->streams_open.load();
  }

  uint64_t Ended(ServiceCounters::End end) const {
    return server_->counters()->streams_ended[end].load();
  }
  uint64_t EndedTotal() const {
    uint64_t total = 0;
    for (int i = 0; i < ServiceCounters::kNumEnds; ++i) {
      total += Ended(static_cast<ServiceCounters::End>(i));
    }
    return total;
  }

  index::KvIndex index_;
  uint64_t next_position_ = 1;
  EppOptions options_;
  std::unique_ptr<EppServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::ExternalProcessor::Stub> stub_;
};

// A whole request: the pick must be the worker holding the prompt (prefix
// weight 2 beats any load score), header and metadata equal, the body echoed.
bool WholePick(pb::ExternalProcessor::Stub* stub, int w, std::string* error) {
  GatewayStream stream(stub);
  const std::string body = Body(PromptOf(w));
  auto pick = stream.Request({.body = body});
  if (!pick.ok()) return *error = pick.status().ToString(), false;
  if (pick->immediate_status != 0) {
    return *error = "immediate " + std::to_string(pick->immediate_status), false;
  }
  if (pick->endpoints.empty() || pick->endpoints[0] != Address(w)) {
    return *error = "picked " + (pick->endpoints.empty() ? "nothing" : pick->endpoints[0]) +
                    " for " + Address(w),
           false;
  }
  std::string joined;
  for (const std::string& e : pick->endpoints) joined += (joined.empty() ? "" : ",") + e;
  if (pick->metadata_endpoints != joined) return *error = "metadata differs", false;
  if (pick->body != body) return *error = "echoed body differs", false;
  if (Status s = stream.Response(200, pick->endpoints[0], "{}"); !s.ok()) {
    return *error = s.ToString(), false;
  }
  if (Status s = stream.Finish(); !s.ok()) return *error = s.ToString(), false;
  return true;
}

// A body past the limit in 64 KiB messages: a load-only pick, the body
// passed through unchanged.
bool OversizePassThrough(pb::ExternalProcessor::Stub* stub, size_t i, std::string* error) {
  GatewayStream stream(stub);
  std::string body = Body(PromptOf(static_cast<int>(i % kWorkers)));
  body.insert(body.size() - 1, ",\"pad\":\"" + std::string(3 * kMaxBody + i, 'x') + "\"");
  auto pick = stream.Request({.body = body});
  if (!pick.ok()) return *error = pick.status().ToString(), false;
  if (pick->endpoints.empty()) return *error = "oversize: no pick", false;
  if (pick->body != body) return *error = "oversize: the pass-through differs", false;
  if (Status s = stream.Response(200, pick->endpoints[0], "{}"); !s.ok()) {
    return *error = s.ToString(), false;
  }
  if (Status s = stream.Finish(); !s.ok()) return *error = s.ToString(), false;
  return true;
}

// Headers and part of the body, then the client cancels.
void CancelMidBody(pb::ExternalProcessor::Stub* stub, int w) {
  grpc::ClientContext context;
  auto stream = stub->Process(&context);
  const std::string body = Body(PromptOf(w));
  if (stream->Write(Headers())) stream->Write(BodyChunk(body.substr(0, body.size() / 2), false));
  context.TryCancel();
  (void)stream->Finish();
}

// One message past gRPC's receive limit (the body limit + 64 KiB): the
// server refuses it and the stream fails.
bool MessageTooLarge(pb::ExternalProcessor::Stub* stub, std::string* error) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub->Process(&context);
  stream->Write(Headers());
  stream->Write(BodyChunk(std::string(kMaxBody + (128 << 10), 'y'), true));
  pb::ProcessingResponse response;
  while (stream->Read(&response)) {
    if (response.has_request_headers()) return *error = "a pick for a refused message", false;
  }
  if (stream->Finish().ok()) return *error = "a refused message ended OK", false;
  return true;
}

// Headers only, then half-close: the stream ends without a body.
void HeadersThenHalfClose(pb::ExternalProcessor::Stub* stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub->Process(&context);
  stream->Write(Headers());
  stream->WritesDone();
  pb::ProcessingResponse response;
  while (stream->Read(&response)) {
  }
  (void)stream->Finish();
}

TEST_F(EppReactorStressTest, ManyStreamsCancelsOversizeWhileTheIndexChanges) {
  constexpr int kThreads = 12;
  constexpr int kPerThread = 30;
  std::atomic<bool> stop_writer{false};
  // The apply loop's role: other prompts stored and removed on random
  // workers while the picks read the index (never the checked prompts).
  std::thread writer([&] {
    std::mt19937 rng(7);
    uint64_t position = next_position_;
    while (!stop_writer.load()) {
      std::vector<uint32_t> tokens(4 * kBlockSize);
      for (auto& t : tokens) t = 500000 + rng() % 1000;
      const int w = static_cast<int>(rng() % kWorkers);
      index_.Apply(Stored(w, SequenceHashes(tokens)), position++);
      PlacementEvent removed = Stored(w, SequenceHashes(tokens));
      removed.kind = PlacementKind::kRemoved;
      index_.Apply(removed, position++);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::atomic<int> whole{0}, oversize{0}, too_large{0}, cancelled{0}, half_closed{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> gateways;
  for (int t = 0; t < kThreads; ++t) {
    gateways.emplace_back([&, t] {
      for (int i = 0; i < kPerThread && errors[t].empty(); ++i) {
        const size_t n = static_cast<size_t>(t * kPerThread + i);
        switch (n % 8) {
          case 0:
          case 1:
          case 2:
          case 3:
            if (WholePick(stub_.get(), static_cast<int>(n % kWorkers), &errors[t])) ++whole;
            break;
          case 4:
            if (OversizePassThrough(stub_.get(), n, &errors[t])) ++oversize;
            break;
          case 5:
            CancelMidBody(stub_.get(), static_cast<int>(n % kWorkers));
            ++cancelled;
            break;
          case 6:
            if (MessageTooLarge(stub_.get(), &errors[t])) ++too_large;
            break;
          default:
            HeadersThenHalfClose(stub_.get());
            ++half_closed;
        }
      }
    });
  }
  for (auto& g : gateways) g.join();
  stop_writer.store(true);
  writer.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "gateway thread " << t;
  constexpr int kStreams = kThreads * kPerThread;
  ASSERT_EQ(whole + oversize + too_large + cancelled + half_closed, kStreams);

  EXPECT_EQ(OpenStreamsAfterSettling(), 0);
  // Every stream the server saw ended once, and the finished ones as what they were.
  EXPECT_EQ(Ended(ServiceCounters::kComplete), static_cast<uint64_t>(whole.load()));
  EXPECT_EQ(Ended(ServiceCounters::kOversize), static_cast<uint64_t>(oversize.load()));
  EXPECT_EQ(server_->counters()->oversize_passthrough.load(),
            static_cast<uint64_t>(oversize.load()));
  EXPECT_EQ(server_->counters()->picks_prefix.load(), static_cast<uint64_t>(whole.load()));
  EXPECT_EQ(server_->counters()->served_pick.load(),
            static_cast<uint64_t>(whole.load() + oversize.load()));
  // A cancelled client may go before the server sees its stream at all.
  EXPECT_GE(EndedTotal(), static_cast<uint64_t>(kStreams - cancelled.load()));
  EXPECT_LE(EndedTotal(), static_cast<uint64_t>(kStreams));
  EXPECT_GE(Ended(ServiceCounters::kNoBody), static_cast<uint64_t>(half_closed.load()));
}

TEST_F(EppReactorStressTest, StopWhileStreamsAreOpen) {
  constexpr int kWaiting = 8;  // streams that never send their body's end
  constexpr int kBusy = 4;     // threads picking until the server is gone
  std::atomic<int> waiting_started{0};
  std::vector<std::thread> clients;
  std::atomic<int> waiting_ended{0};
  for (int t = 0; t < kWaiting; ++t) {
    clients.emplace_back([&, t] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      auto stream = stub_->Process(&context);
      const std::string body = Body(PromptOf(t % kWorkers));
      stream->Write(Headers());
      stream->Write(BodyChunk(body.substr(0, 10), false));
      ++waiting_started;
      pb::ProcessingResponse response;
      while (stream->Read(&response)) {
      }
      (void)stream->Finish();
      ++waiting_ended;
    });
  }
  std::atomic<bool> server_gone{false};
  std::atomic<int> picks_before_stop{0};
  for (int t = 0; t < kBusy; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; !server_gone.load(); ++i) {
        GatewayStream stream(stub_.get(), std::chrono::seconds(10));
        auto pick = stream.Request({.body = Body(PromptOf((t + i) % kWorkers))});
        if (pick.ok() && !pick->endpoints.empty()) ++picks_before_stop;
        if (!pick.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while ((waiting_started.load() < kWaiting || picks_before_stop.load() < 20) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(waiting_started.load(), kWaiting);
  ASSERT_GE(picks_before_stop.load(), 20);
  const auto stop_start = Clock::now();
  server_->Stop();  // gRPC's shutdown: 2 s for the open streams, then cancelled
  const double stop_s = std::chrono::duration<double>(Clock::now() - stop_start).count();
  server_gone.store(true);
  for (auto& c : clients) c.join();
  EXPECT_EQ(waiting_ended.load(), kWaiting);
  EXPECT_LT(stop_s, 10.0);
  // Every stream the server took ended (the waiting ones without their
  // body's end), its in-flight pick released.
  EXPECT_EQ(server_->counters()->streams_open.load(), 0);
  EXPECT_GE(Ended(ServiceCounters::kCancelled) + Ended(ServiceCounters::kNoBody),
            static_cast<uint64_t>(kWaiting));
  server_.reset();  // the destructor after Stop: nothing left to do
}

}  // namespace
}  // namespace kvindex::epp
