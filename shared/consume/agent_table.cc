#include "shared/consume/agent_table.h"

#include <algorithm>

namespace kvindex::consume {

void AgentTable::AppendClears(const AgentState& agent, const std::string& name,
                              std::vector<PlacementEvent>* clears) {
  for (const SourceKey& source : agent.sources) {
    PlacementEvent& clear = clears->emplace_back();
    clear.kind = PlacementKind::kCleared;  // empty model: every model
    clear.source = source;
    clear.agent = name;
  }
}

void AgentTable::FailClosed(AgentState& agent, const std::string& name, uint64_t position,
                            std::vector<PlacementEvent>* clears) {
  agent.gaps += 1;
  AppendClears(agent, name, clears);
  resync_.push_back({name, position});
}

AgentTable::Verdict AgentTable::Admit(const LogBatch::Message& message,
                                      std::vector<PlacementEvent>* clears) {
  const codec::MessageHeader& header = message.header;
  if (header.agent.empty()) return Verdict::kApply;
  MutexLock lock(&mu_);
  if (message.invalid) {
    auto it = agents_.find(header.agent);
    if (it != agents_.end()) FailClosed(it->second, header.agent, message.position, clears);
    return Verdict::kApply;  // nothing to apply but its position
  }
  if (!header.sequenced()) return Verdict::kApply;
  AgentState& agent = agents_[header.agent];
  if (header.incarnation < agent.incarnation ||
      (header.incarnation == agent.incarnation && header.msg_seq <= agent.last_msg_seq)) {
    agent.stale += 1;
    return Verdict::kStale;
  }
  if (header.incarnation > agent.incarnation) {
    // A new process: its first message clears its sources itself (start-up
    // clear), so only a gap inside its own numbering is a loss.
    const bool first_seen = agent.incarnation == 0;
    agent.incarnation = header.incarnation;
    if (header.msg_seq != 1) {
      if (first_seen) {
        // The log no longer holds the agent's start (retention): what was
        // missed can only be missing stores, so nothing to clear, but the
        // agent's full state is wanted.
        resync_.push_back({header.agent, message.position});
      } else {
        FailClosed(agent, header.agent, message.position, clears);
      }
    }
  } else if (header.msg_seq != agent.last_msg_seq + 1) {
    FailClosed(agent, header.agent, message.position, clears);
  }
  agent.last_msg_seq = header.msg_seq;
  return Verdict::kApply;
}

bool AgentTable::Observe(const PlacementEvent& event, uint64_t position,
                         std::chrono::steady_clock::time_point now,
                         std::vector<PlacementEvent>* clears) {
  switch (event.kind) {
    case PlacementKind::kHeartbeat: {
      if (event.agent.empty()) return true;
      MutexLock lock(&mu_);
      AgentState& agent = agents_[event.agent];
      agent.last_heartbeat_position = position;
      agent.lease_ms = event.lease_ms;
      agent.expired = false;
      agent.heartbeat_seen = now;
      for (const SourceKey& source : event.sources) agent.sources.insert(source);
      return true;
    }
    case PlacementKind::kAgentExpired: {
      MutexLock lock(&mu_);
      auto it = agents_.find(event.agent);
      if (it == agents_.end()) return false;
      AgentState& agent = it->second;
      // A heartbeat applied after the one the deciding router saw: alive.
      if (agent.expired || agent.last_heartbeat_position > event.heartbeat_seq) return false;
      agent.expired = true;
      agent.expiries += 1;
      AppendClears(agent, event.agent, clears);
      return false;
    }
    case PlacementKind::kStored:
    case PlacementKind::kRemoved:
    case PlacementKind::kCleared: {
      if (event.agent.empty()) return true;
      MutexLock lock(&mu_);
      agents_[event.agent].sources.insert(event.source);
      return true;
    }
    case PlacementKind::kWorkerExpired:
      return true;
  }
  return true;
}

std::vector<AgentTable::AgentView> AgentTable::Agents() const {
  std::vector<AgentView> out;
  {
    MutexLock lock(&mu_);
    out.reserve(agents_.size());
    for (const auto& [name, agent] : agents_) {
      AgentView& view = out.emplace_back();
      static_cast<AgentState&>(view) = agent;
      view.agent = name;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const AgentView& a, const AgentView& b) { return a.agent < b.agent; });
  return out;
}

void AgentTable::Restore(const std::vector<AgentView>& agents,
                         std::chrono::steady_clock::time_point now) {
  MutexLock lock(&mu_);
  agents_.clear();
  resync_.clear();
  for (const AgentView& view : agents) {
    AgentState& agent = agents_[view.agent];
    agent = static_cast<const AgentState&>(view);
    agent.heartbeat_seen = now;
  }
}

std::vector<AgentTable::ResyncRequest> AgentTable::TakeResyncRequests() {
  MutexLock lock(&mu_);
  std::vector<ResyncRequest> out;
  out.swap(resync_);
  return out;
}

}  // namespace kvindex::consume
