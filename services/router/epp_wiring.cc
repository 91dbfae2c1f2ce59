#include "services/router/epp_wiring.h"

#include "shared/codec/load_codec.h"
#include "shared/nats/subjects.h"

namespace kvindex::router {

std::function<std::vector<epp::Endpoint>()> AnnouncedEndpoints(const consume::ApplyLoop* apply) {
  return [apply] {
    std::vector<epp::Endpoint> out;
    for (const consume::ApplyLoop::SourceActivity& row : apply->Activity()) {
      if (!row.live || row.endpoint.empty()) continue;
      if (apply->agents().Owner(row.source) != row.agent) continue;
      out.push_back({row.endpoint, row.source, row.endpoint_model});
    }
    return out;
  };
}

StatusOr<std::unique_ptr<LoadFeed>> LoadFeed::Subscribe(natsConnection* connection,
                                                        const std::string& prefix,
                                                        const consume::AgentTable* agents,
                                                        epp::EppServer* epp) {
  std::unique_ptr<LoadFeed> feed(new LoadFeed(agents, epp));
  const std::string subjects = codec::LoadSubjects(prefix);
  const natsStatus status = natsConnection_Subscribe(
      &feed->subscription_, connection, subjects.c_str(), &LoadFeed::OnMessage, feed.get());
  if (status != NATS_OK) {
    return absl::UnavailableError("subscribing to " + subjects + ": " + natsStatus_GetText(status));
  }
  return feed;
}

LoadFeed::~LoadFeed() {
  if (subscription_ == nullptr) return;
  if (natsSubscription_Drain(subscription_) == NATS_OK) {
    natsSubscription_WaitForDrainCompletion(subscription_, 2000);
  } else {
    natsSubscription_Unsubscribe(subscription_);
  }
  natsSubscription_Destroy(subscription_);
}

void LoadFeed::OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<LoadFeed*>(closure)->Receive(
      natsMsg_GetSubject(msg),
      std::string_view(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg))));
  natsMsg_Destroy(msg);
}

void LoadFeed::Receive(std::string_view subject, std::string_view data) {
  const size_t dot = subject.rfind('.');
  StatusOr<std::string> node = nats::DecodeToken(subject.substr(dot + 1));
  StatusOr<codec::LoadReport> report = codec::DecodeLoadReport(data);
  if (dot == std::string_view::npos || !node.ok() || !report.ok() || report->agent != *node) {
    epp_->CountLoadRefused();
    return;
  }
  const auto now = epp::LoadTable::Clock::now();
  for (const codec::SourceLoad& sample : report->samples) {
    if (agents_->Owner(sample.source) != *node) {
      epp_->CountLoadRefused();
      continue;
    }
    epp_->load()->Update(sample.source, sample.load, now);
  }
}

}  // namespace kvindex::router
