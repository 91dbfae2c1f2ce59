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
  return absl::OkStatus();
}

void ResyncListener::Stop() {
  if (sub_ == nullptr) return;
  natsSubscription_Unsubscribe(sub_);
  natsSubscription_Destroy(sub_);
  sub_ = nullptr;
}

void ResyncListener::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* self = static_cast<ResyncListener*>(closure);
  self->requests_.fetch_add(1);
  log::Get("publish")->warn("routers asked for this agent's state ({}): publishing snapshots",
                            natsMsg_GetSubject(msg));
  natsMsg_Destroy(msg);
  self->on_request_();
}

}  // namespace kvindex
