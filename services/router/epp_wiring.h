// The endpoint picker's inputs from the rest of the router (docs/epp.md):
// the endpoints the agents announce on the log, and the engines' load the
// agents publish on core NATS (or, embedded, the router scrapes itself).
#pragma once

#include <nats/nats.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/base/status.h"
#include "shared/consume/agent_table.h"
#include "shared/consume/apply_loop.h"
#include "shared/epp/endpoints.h"
#include "shared/epp/epp_server.h"

namespace kvindex::router {

// The endpoints of the live sources, as their agents' last heartbeats
// announced them (ApplyLoop::Activity), each only while the announcing
// agent still owns its source (AgentTable::Owner: an expired agent's
// endpoints are gone). `apply` must outlive the returned function.
std::function<std::vector<epp::Endpoint>()> AnnouncedEndpoints(const consume::ApplyLoop* apply);

// Load reports on core NATS (<prefix>_load.<node>) into the picker's
// LoadTable. The log's authority rules hold: a report speaks for the node
// its subject names, and only its samples of sources that node owns
// (AgentTable::Owner) are kept; the rest is refused and counted.
class LoadFeed {
 public:
  // `agents` and `epp` must outlive the feed.
  static StatusOr<std::unique_ptr<LoadFeed>> Subscribe(natsConnection* connection,
                                                       const std::string& prefix,
                                                       const consume::AgentTable* agents,
                                                       epp::EppServer* epp);
  ~LoadFeed();  // drains: no callback runs once it returns
  LoadFeed(const LoadFeed&) = delete;
  LoadFeed& operator=(const LoadFeed&) = delete;

  // One message (the NATS callback; tests).
  void Receive(std::string_view subject, std::string_view data);

 private:
  LoadFeed(const consume::AgentTable* agents, epp::EppServer* epp) : agents_(agents), epp_(epp) {}
  static void OnMessage(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure);

  const consume::AgentTable* const agents_;
  epp::EppServer* const epp_;
  natsSubscription* subscription_ = nullptr;
};

}  // namespace kvindex::router
