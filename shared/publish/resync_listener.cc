#include "shared/publish/resync_listener.h"

#include "shared/log/log.h"

namespace kvindex {

ResyncListener::ResyncListener(jsCtx* js, std::string stream, std::string subject,
                               std::function<void()> on_request)
    : js_(js),
      stream_(std::move(stream)),
      subject_(std::move(subject)),
      on_request_(std::move(on_request)) {}

ResyncListener::~ResyncListener() { Stop(); }

Status ResyncListener::Start() {
  if (sub_ != nullptr) return absl::OkStatus();
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream_.c_str();
  so.Ordered = true;
  so.Config.DeliverPolicy = js_DeliverNew;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus status = js_Subscribe(&sub_, js_, subject_.c_str(), &ResyncListener::OnMessage,
                                         this, nullptr, &so, &code);
  if (status != NATS_OK) {
    sub_ = nullptr;
    return absl::UnavailableError("subscribe to " + subject_ + ": " + natsStatus_GetText(status));
  }
  {
    MutexLock lock(&mu_);
    completed_ = false;
  }
  if (natsSubscription_SetOnCompleteCB(sub_, &ResyncListener::OnComplete, this) != NATS_OK) {
    // Closed already (the connection went away): nothing runs any more.
    MutexLock lock(&mu_);
    completed_ = true;
  }
  return absl::OkStatus();
}

void ResyncListener::Stop(std::chrono::milliseconds drain) {
  if (sub_ == nullptr) return;
  // A closed connection completed the subscription already; else the
  // completion callback comes after the last message callback returned.
  natsSubscription_Unsubscribe(sub_);
  {
    const auto deadline = std::chrono::steady_clock::now() + drain;
    MutexLock lock(&mu_);
    while (!completed_) {
      if (!completed_cv_.WaitUntil(&mu_, deadline)) break;
    }
    if (!completed_) {
      log::Get("publish")->error("resync listener: the subscription did not complete within {} ms",
                                 drain.count());
    }
  }
  natsSubscription_Destroy(sub_);
  sub_ = nullptr;
}

void ResyncListener::OnComplete(void* closure) {
  auto* self = static_cast<ResyncListener*>(closure);
  MutexLock lock(&self->mu_);
  self->completed_ = true;
  self->completed_cv_.SignalAll();
}

void ResyncListener::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* self = static_cast<ResyncListener*>(closure);
  self->requests_.fetch_add(1);
  uint64_t suppressed = 0;
  if (self->warnings_.Allow(&suppressed)) {
    log::Get("publish")->warn(
        "routers asked for this agent's state ({}): publishing snapshots ({} suppressed)",
        natsMsg_GetSubject(msg), suppressed);
  }
  natsMsg_Destroy(msg);
  self->on_request_();
}

}  // namespace kvindex
