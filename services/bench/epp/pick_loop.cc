#include "services/bench/epp/pick_loop.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <chrono>

namespace kvindex::bench {
namespace {

namespace pb = envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

}  // namespace

PickRequests BuildPickRequests(const std::string& body) {
  PickRequests out;
  auto* headers = out.messages.emplace_back().mutable_request_headers()->mutable_headers();
  for (const auto& [key, value] : {std::pair{":method", "POST"},
                                   {":path", "/v1/completions"},
                                   {":authority", "gateway"},
                                   {"content-type", "application/json"}}) {
    auto* h = headers->add_headers();
    h->set_key(key);
    h->set_raw_value(value);
  }
  for (size_t offset = 0; offset < body.size(); offset += kBodyMessageBytes) {
    const size_t n = std::min(kBodyMessageBytes, body.size() - offset);
    auto* chunk = out.messages.emplace_back().mutable_request_body();
    chunk->set_body(body.data() + offset, n);
    chunk->set_end_of_stream(offset + n == body.size());
  }
  return out;
}

// One request's stream. Writes go out one after another; the answers are
// read meanwhile. The half-close waits for both the last write and the
// echoed body's end (`pending_`: whichever comes second sends it).
class PickLoop::Stream final
    : public grpc::ClientBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse> {
 public:
  Stream(PickLoop* loop, uint32_t slot, pb::ExternalProcessor::Stub* stub,
         const PickRequests* requests)
      : loop_(loop), slot_(slot), requests_(requests), start_(Clock::now()) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    stub->async()->Process(&context_, this);
    StartWrite(&requests_->messages[0]);
    StartRead(&response_);
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the stream failed: OnDone tells
    if (++written_ < requests_->messages.size()) {
      StartWrite(&requests_->messages[written_]);
    } else if (pending_.fetch_sub(1) == 1) {
      StartWritesDone();
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (!picked_) {
      picked_ = true;
      latency_s_ = std::chrono::duration<double>(Clock::now() - start_).count();
      if (response_.has_request_headers()) {
        for (const auto& h :
             response_.request_headers().response().header_mutation().set_headers()) {
          if (h.header().key() == kDestination && !h.header().raw_value().empty()) {
            has_pick_ = true;
          }
        }
      }
      if (!has_pick_) {  // an immediate response or an unexpected answer
        context_.TryCancel();
        return;
      }
    } else if (!response_.has_request_body() || response_.request_body()
                                                    .response()
                                                    .body_mutation()
                                                    .streamed_response()
                                                    .end_of_stream()) {
      if (pending_.fetch_sub(1) == 1) StartWritesDone();
      StartRead(&response_);  // to the server's end of the stream
      return;
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    const double stream_s = std::chrono::duration<double>(Clock::now() - start_).count();
    loop_->Ended(slot_, latency_s_, stream_s, status.ok() && has_pick_);
    delete this;
  }

 private:
  PickLoop* const loop_;
  const uint32_t slot_;
  const PickRequests* const requests_;
  const Clock::time_point start_;
  grpc::ClientContext context_;
  pb::ProcessingResponse response_;
  size_t written_ = 0;           // write side only
  bool picked_ = false;          // read side only
  bool has_pick_ = false;        // read side, then OnDone
  double latency_s_ = 0;         // read side, then OnDone
  std::atomic<int> pending_{2};  // the last write done, the echo's end read
};

PickLoop::PickLoop(std::vector<std::shared_ptr<grpc::Channel>> channels,
                   const std::vector<PickRequests>* requests, uint32_t streams)
    : requests_(requests) {
  for (auto& channel : channels) stubs_.push_back(pb::ExternalProcessor::NewStub(channel));
  {
    MutexLock lock(&mu_);
    active_ = streams;
  }
  for (uint32_t slot = 0; slot < streams; ++slot) Start(slot);
}

PickLoop::~PickLoop() { Stop(); }

void PickLoop::Start(uint32_t slot) {
  const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  new Stream(this, slot, stubs_[slot % stubs_.size()].get(), &(*requests_)[n % requests_->size()]);
}

void PickLoop::Ended(uint32_t slot, double latency_s, double stream_s, bool ok) {
  {
    MutexLock lock(&mu_);
    if (ok) {
      result_.latency_s.push_back(latency_s);
      result_.stream_s.push_back(stream_s);
    } else {
      ++result_.errors;
    }
    if (stop_.load(std::memory_order_relaxed)) {
      if (--active_ == 0) idle_.SignalAll();
      return;
    }
  }
  Start(slot);
}

PickLoop::Result PickLoop::Stop() {
  stop_.store(true);
  MutexLock lock(&mu_);
  while (active_ > 0) idle_.Wait(&mu_);
  if (stopped_) return {};
  stopped_ = true;
  return std::move(result_);
}

}  // namespace kvindex::bench
