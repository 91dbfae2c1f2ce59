#include "shared/consume/liveness_monitor.h"

#include "shared/log/log.h"

namespace kvindex::consume {

LivenessMonitor::LivenessMonitor(ApplyLoop* loop, RouterProbe* probe, Append append,
                                 LivenessOptions options)
    : loop_(loop), probe_(probe), append_(std::move(append)), options_(options) {}

LivenessMonitor::~LivenessMonitor() { Stop(); }

void LivenessMonitor::Start() {
  if (thread_.joinable()) return;
  stop_.Reset();
  thread_ = std::thread([this] { Run(); });
}

void LivenessMonitor::Stop() {
  if (!thread_.joinable()) return;
  stop_.Raise();
  thread_.join();
}

void LivenessMonitor::Run() {
  while (!stop_.WaitFor(options_.interval)) CheckOnce(std::chrono::steady_clock::now());
}

void LivenessMonitor::CheckOnce(std::chrono::steady_clock::time_point now) {
  for (AgentTable::ResyncRequest& r : loop_->agents().TakeResyncRequests()) {
    resync_.push_back(std::move(r));
  }
  // A router still replaying history proposes nothing: its clock has not
  // seen the agents live yet, and the live replicas decide meanwhile.
  if (!loop_->CaughtUp()) return;
  auto logger = log::Get("consume");
  for (size_t i = 0; i < resync_.size(); ++i) {
    const AgentTable::ResyncRequest& r = resync_[i];
    const std::string id = "kvindex-resync:" + r.agent + ":" + std::to_string(r.position);
    const Status status = append_(r.agent, id, {});
    if (!status.ok()) {
      resync_.erase(resync_.begin(), resync_.begin() + static_cast<std::ptrdiff_t>(i));
      return;  // retried at the next check
    }
    if (probe_ != nullptr) probe_->RecordLog(LogOutcome::kResyncRequested, 1);
    logger->info("asked agent {} for snapshots (messages lost before log position {})", r.agent,
                 r.position);
  }
  resync_.clear();
  for (const AgentTable::AgentView& agent : loop_->agents().Agents()) {
    if (agent.expired || agent.last_heartbeat_position == 0 || agent.lease_ms == 0) continue;
    if (now - agent.heartbeat_seen < std::chrono::milliseconds(agent.lease_ms)) continue;
    auto [it, inserted] = proposed_.try_emplace(agent.agent, 0);
    if (!inserted && it->second == agent.last_heartbeat_position) continue;
    PlacementEvent expire;
    expire.kind = PlacementKind::kAgentExpired;
    expire.agent = agent.agent;
    expire.heartbeat_seq = agent.last_heartbeat_position;
    const std::string id =
        "kvindex-expire:" + agent.agent + ":" + std::to_string(agent.last_heartbeat_position);
    const Status status = append_(agent.agent, id, {expire});
    if (!status.ok()) {
      static log::RateLimiter warnings{std::chrono::seconds(10)};
      uint64_t suppressed = 0;
      if (warnings.Allow(&suppressed)) {
        logger->warn("cannot append the expiry of agent {}: {} ({} suppressed)", agent.agent,
                     status.ToString(), suppressed);
      }
      continue;
    }
    it->second = agent.last_heartbeat_position;
    if (probe_ != nullptr) probe_->RecordLog(LogOutcome::kExpiryAppended, 1);
    logger->warn("agent {} silent for longer than its lease ({} ms): expiry appended", agent.agent,
                 agent.lease_ms);
  }
}

}  // namespace kvindex::consume
