#include "shared/consume/liveness_monitor.h"

#include <algorithm>
#include <random>

#include "shared/base/strings.h"
#include "shared/log/log.h"

namespace kvindex::consume {

LivenessMonitor::LivenessMonitor(ApplyLoop* loop, RouterProbe* probe, Append append,
                                 LivenessOptions options)
    : loop_(loop), probe_(probe), append_(std::move(append)), options_(options), nonce_([] {
        std::random_device random;
        return strings::Cat((uint64_t{random()} << 32) | uint64_t{random()});
      }()) {}

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
  absl::flat_hash_map<std::string, Proposal> proposed;
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point> unannounced;
  for (const AgentTable::Lease& agent : loop_->agents().Leases()) {
    auto lease = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(agent.lease_ms),
                                                     options_.max_lease);
    auto since = agent.heartbeat_seen;
    std::string id =
        "kvindex-expire:" + agent.agent + ":" + std::to_string(agent.heartbeat_position);
    if (!agent.heartbeated) {
      // Never heartbeated: the router's longest lease, from when this router
      // first saw the node live (a restarted router grants a full one). The
      // id names the log position where the node became live, which every
      // replica shares: one message for all of them, a fresh one per life.
      auto it = unannounced_.find(agent.agent);
      since = it == unannounced_.end() ? now : it->second;
      unannounced.emplace(agent.agent, since);
      lease = options_.max_lease;
      id = strings::Cat("kvindex-expire:", agent.agent, ":0:", agent.live_position);
    }
    if (now - since < lease) continue;
    Proposal proposal{.heartbeat_position = agent.heartbeat_position, .at = now};
    if (auto it = proposed_.find(agent.agent);
        it != proposed_.end() && it->second.heartbeat_position == agent.heartbeat_position) {
      proposal = it->second;
      if (now - proposal.at < lease) {
        proposed.emplace(agent.agent, proposal);
        continue;  // give it a lease to take effect
      }
      // Still not expired a lease later: the id was taken (or the message
      // lost). Every replica may re-propose; the table applies one.
      proposal.attempts += 1;
      proposal.at = now;
      id += strings::Cat(":", nonce_, ":", proposal.attempts);
    }
    PlacementEvent expire;
    expire.kind = PlacementKind::kAgentExpired;
    expire.agent = agent.agent;
    expire.heartbeat_seq = agent.heartbeat_position;
    const Status status = append_(agent.agent, id, {expire});
    if (!status.ok()) {
      static log::RateLimiter warnings{std::chrono::seconds(10)};
      uint64_t suppressed = 0;
      if (warnings.Allow(&suppressed)) {
        logger->warn("cannot append the expiry of agent {}: {} ({} suppressed)", agent.agent,
                     status.ToString(), suppressed);
      }
      if (auto it = proposed_.find(agent.agent); it != proposed_.end()) {
        proposed.emplace(agent.agent, it->second);  // as it was: retried next check
      }
      continue;
    }
    proposed.emplace(agent.agent, proposal);
    if (probe_ != nullptr) {
      probe_->RecordLog(
          proposal.attempts == 0 ? LogOutcome::kExpiryAppended : LogOutcome::kExpiryReproposed, 1);
    }
    logger->warn(
        "agent {} silent for longer than its lease ({} ms, at most {} ms): expiry {} appended",
        agent.agent, lease.count(), options_.max_lease.count(), id);
  }
  proposed_.swap(proposed);
  unannounced_.swap(unannounced);
}

}  // namespace kvindex::consume
