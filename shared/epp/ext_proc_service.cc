#include "shared/epp/ext_proc_service.h"

#include <deque>
#include <utility>
#include <vector>

#include "shared/base/mutex.h"
#include "shared/epp/worker_pool.h"

namespace kvindex::epp {
namespace {

namespace pb = envoy::service::ext_proc::v3;

// A message that may lead to the pick (and so to the token sources).
bool RequestSide(const pb::ProcessingRequest& request) {
  switch (request.request_case()) {
    case pb::ProcessingRequest::kRequestHeaders:
    case pb::ProcessingRequest::kRequestBody:
    case pb::ProcessingRequest::kRequestTrailers:
      return true;
    default:
      return false;
  }
}

}  // namespace

// One stream. Reads are sequential (the next one starts once a message is
// handled), writes are sequential (the next one starts when the last is
// done); the two run concurrently, so the write queue and the end state are
// under mu_. gRPC may run a reaction inline from StartWrite or Finish: they
// are never called with mu_ held.
class ExtProcService::Reactor final
    : public grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse> {
 public:
  explicit Reactor(ExtProcService* service)
      : service_(service),
        exchange_(&service->options_, service->picker_, service->tokens_, &service->counters_) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // half-close, cancel or a broken stream
      Continue(nullptr, /*reads_over=*/true);
      return;
    }
    if (service_->pool_ != nullptr && RequestSide(request_)) {
      service_->pool_->Post([this] { HandleRequest(); });
    } else {
      HandleRequest();
    }
  }

  void OnWriteDone(bool ok) override {
    {
      MutexLock lock(&mu_);
      writing_ = false;
      queue_.pop_front();
      if (!ok) {  // the stream is gone: nothing more reaches the gateway
        broken_ = true;
        queue_.clear();
      }
    }
    Continue(nullptr, false);
  }

  void OnDone() override {
    exchange_.End();
    delete this;
  }

 private:
  void HandleRequest() {
    answers_.clear();
    exchange_.Handle(&request_, &answers_);
    const bool over = exchange_.finished();  // an immediate response: read no more
    Continue(&answers_, over);
    if (!over) StartRead(&request_);
  }

  // Queues `answers` (moved from), then starts the next write, or finishes
  // once reads are over and every answer is written. Touches nothing of
  // the reactor after Finish (OnDone may already have deleted it).
  void Continue(std::vector<pb::ProcessingResponse>* answers, bool reads_over) {
    const pb::ProcessingResponse* write = nullptr;
    bool finish = false;
    {
      MutexLock lock(&mu_);
      if (answers != nullptr && !broken_) {
        for (pb::ProcessingResponse& answer : *answers) queue_.push_back(std::move(answer));
      }
      reads_over_ = reads_over_ || reads_over;
      if (writing_ || finishing_) return;
      if (!queue_.empty()) {
        writing_ = true;
        write = &queue_.front();  // a deque's elements stay put as it grows
      } else if (reads_over_) {
        finishing_ = finish = true;
      }
    }
    if (write != nullptr) {
      StartWrite(write);
    } else if (finish) {
      Finish(grpc::Status::OK);
    }
  }

  ExtProcService* const service_;
  ExtProcExchange exchange_;  // read side only (and OnDone)
  pb::ProcessingRequest request_;
  std::vector<pb::ProcessingResponse> answers_;  // read side only

  Mutex mu_;
  std::deque<pb::ProcessingResponse> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_over_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

ExtProcService::ExtProcService(ServiceOptions options, Picker* picker, const TokenChain* tokens,
                               int blocking_threads)
    : options_(options), picker_(picker), tokens_(tokens) {
  if (blocking_threads > 0) pool_ = std::make_unique<WorkerPool>(blocking_threads);
}

ExtProcService::~ExtProcService() = default;

grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse>* ExtProcService::Process(
    grpc::CallbackServerContext* /*context*/) {
  return new Reactor(this);
}

}  // namespace kvindex::epp
