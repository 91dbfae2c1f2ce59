#include "shared/consume/agent_table.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_set.h"

namespace kvindex::consume {

void AgentTable::AppendClear(const SourceKey& source, const std::string& name,
                             std::vector<PlacementEvent>* clears) {
  PlacementEvent& clear = clears->emplace_back();
  clear.kind = PlacementKind::kCleared;  // empty model: every model
  clear.source = source;
  clear.agent = name;
}

void AgentTable::FailClosed(AgentState& agent, const std::string& name, uint64_t position,
                            std::vector<PlacementEvent>* clears) {
  agent.gaps += 1;
  for (const SourceKey& source : agent.sources) AppendClear(source, name, clears);
  resync_.push_back({name, position});
}

namespace {

// Live: not expired, or expired and owning sources claimed since (the same
// rule as Leases()).
bool Live(const AgentTable::AgentState& agent) { return !agent.expired || !agent.sources.empty(); }

}  // namespace

bool AgentTable::AtNodeCap(const std::string& node) const {
  auto it = agents_.find(node);
  if (it != agents_.end() && Live(it->second)) return false;
  size_t live = 0;
  for (const auto& [name, agent] : agents_) live += Live(agent) ? 1 : 0;
  return live >= options_.max_nodes;
}

void AgentTable::AppendOwned(const std::string& node, std::vector<SourceKey>* owned) const {
  MutexLock lock(&mu_);
  if (auto it = agents_.find(node); it != agents_.end()) {
    owned->insert(owned->end(), it->second.sources.begin(), it->second.sources.end());
  }
}

void AgentTable::Claim(AgentState& agent, const std::string& name, const SourceKey& source) {
  auto [it, inserted] = owners_.try_emplace(source, name);
  // Another node's source reaches here only from the trusted in-process log:
  // the set of each agent stays its owned sources.
  if (inserted || it->second == name) agent.sources.insert(source);
}

std::optional<LogRefusal> AgentTable::Authorize(const LogBatch::Message& message,
                                                std::span<const PlacementEvent> events,
                                                const LogSubject& origin) const {
  const codec::MessageHeader& header = message.header;
  const std::string& node = origin.node;
  switch (origin.kind) {
    case LogSubject::kTrusted:
      return std::nullopt;
    case LogSubject::kMalformed:
      return LogRefusal::kBadSubject;
    case LogSubject::kExpire:
      // Routers' decisions about `node`: unsequenced, agent_expired only.
      if (message.invalid) return std::nullopt;  // nothing to apply, nobody to clear
      if (header.sequenced() || !header.agent.empty()) return LogRefusal::kSubjectMismatch;
      for (const PlacementEvent& event : events) {
        if (event.kind != PlacementKind::kAgentExpired) return LogRefusal::kKindNotAllowed;
        if (event.agent != node) return LogRefusal::kForeignEvent;
      }
      return std::nullopt;
    case LogSubject::kEvents:
    case LogSubject::kAgent:
      break;
  }
  if (header.agent != node) return LogRefusal::kSubjectMismatch;
  if (message.invalid) return std::nullopt;  // no events; the node's own subject
  if (!header.sequenced()) return LogRefusal::kSubjectMismatch;  // agents number every message
  if (AtNodeCap(node)) return LogRefusal::kTooManyNodes;
  // Sources nobody owns yet that the message would claim (rare: first
  // announcements only).
  absl::flat_hash_set<SourceKey> claims;
  // The lambda is analysed on its own, without mu_: it reads owners_
  // through this pointer, taken here under mu_.
  const auto* owners = &owners_;
  auto check = [&](const SourceKey& source) -> std::optional<LogRefusal> {
    auto owner = owners->find(source);
    if (owner == owners->end()) {
      claims.insert(source);
    } else if (owner->second != node) {
      return LogRefusal::kForeignSource;
    }
    return std::nullopt;
  };
  for (const PlacementEvent& event : events) {
    if (event.agent != node) return LogRefusal::kForeignEvent;
    switch (event.kind) {
      case PlacementKind::kHeartbeat:
        for (const SourceKey& source : event.sources) {
          if (auto why = check(source)) return why;
        }
        // A node announces endpoints of the sources it lists (and so owns).
        for (const SourceEndpoint& endpoint : event.endpoints) {
          if (std::find(event.sources.begin(), event.sources.end(), endpoint.source) ==
              event.sources.end()) {
            return LogRefusal::kForeignSource;
          }
        }
        break;
      case PlacementKind::kStored:
      case PlacementKind::kRemoved:
      case PlacementKind::kCleared:
        if (auto why = check(event.source)) return why;
        break;
      case PlacementKind::kWorkerExpired:
      case PlacementKind::kAgentExpired:
        return LogRefusal::kKindNotAllowed;
    }
  }
  auto it = agents_.find(node);
  const size_t owned = it == agents_.end() ? 0 : it->second.sources.size();
  if (owned + claims.size() > options_.max_sources_per_node) return LogRefusal::kTooManySources;
  const uint64_t current = it == agents_.end() ? 0 : it->second.incarnation;
  if (header.incarnation > current && message.stored_ns != 0) {
    const auto ahead = static_cast<uint64_t>(options_.max_incarnation_ahead.count());
    if (header.incarnation > message.stored_ns && header.incarnation - message.stored_ns > ahead) {
      return LogRefusal::kIncarnationAhead;
    }
  }
  return std::nullopt;
}

AgentTable::Verdict AgentTable::Admit(const LogBatch::Message& message,
                                      std::span<const PlacementEvent> events,
                                      std::vector<PlacementEvent>* clears, LogRefusal* refusal) {
  const LogSubject origin = ParseLogSubject(message.subject);
  const codec::MessageHeader& header = message.header;
  MutexLock lock(&mu_);
  if (std::optional<LogRefusal> why = Authorize(message, events, origin)) {
    *refusal = *why;
    return Verdict::kRefused;
  }
  if (header.agent.empty() || origin.kind == LogSubject::kExpire) return Verdict::kApply;
  if (message.invalid) {
    auto it = agents_.find(header.agent);
    if (it != agents_.end()) {
      FailClosed(it->second, header.agent, message.position, clears);
      it->second.renumber = true;
    }
    return Verdict::kApply;  // nothing to apply but its position
  }
  if (!header.sequenced()) return Verdict::kApply;
  AgentState& agent = agents_[header.agent];
  // A process's first message starts it, whatever its incarnation's value:
  // a restart on a clock behind the previous run's (another host) numbers
  // itself lower and would otherwise be stale for good. Later messages of a
  // lower incarnation are a late (or still running) older process: stale.
  const bool start = header.msg_seq == 1 && header.incarnation != agent.incarnation;
  if (!start &&
      (header.incarnation < agent.incarnation ||
       (header.incarnation == agent.incarnation && header.msg_seq <= agent.last_msg_seq))) {
    agent.stale += 1;
    return Verdict::kStale;
  }
  if (start || header.incarnation > agent.incarnation) {
    // A new process: its first message clears its sources itself (start-up
    // clear), so only a gap inside its own numbering is a loss. Its first
    // heartbeat decides what the previous incarnation's sources become.
    const bool first_seen = agent.incarnation == 0;
    agent.incarnation = header.incarnation;
    agent.last_heartbeat_position = 0;
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
  } else if (header.msg_seq != agent.last_msg_seq + 1 && !agent.renumber) {
    FailClosed(agent, header.agent, message.position, clears);
  }
  // Whatever the undecodable message held preceded this one and was cleared.
  agent.renumber = false;
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
      for (const SourceKey& source : event.sources) Claim(agent, event.agent, source);
      if (agent.last_heartbeat_position == 0) {
        // The incarnation's first heartbeat: what it does not list is
        // nothing this process follows (any more).
        for (auto it = agent.sources.begin(); it != agent.sources.end();) {
          if (std::find(event.sources.begin(), event.sources.end(), *it) != event.sources.end()) {
            ++it;
            continue;
          }
          AppendClear(*it, event.agent, clears);
          owners_.erase(*it);
          it = agent.sources.erase(it);
        }
      }
      agent.last_heartbeat_position = position;
      agent.lease_ms = event.lease_ms;
      agent.expired = false;
      agent.heartbeat_seen = now;
      return true;
    }
    case PlacementKind::kAgentExpired: {
      MutexLock lock(&mu_);
      auto it = agents_.find(event.agent);
      if (it == agents_.end()) return false;
      AgentState& agent = it->second;
      // Already expired and nothing claimed since; or a heartbeat applied
      // after the one the deciding router saw: alive.
      if (agent.expired && agent.sources.empty()) return false;
      if (agent.last_heartbeat_position > event.heartbeat_seq) return false;
      agent.expired = true;
      agent.expiries += 1;
      for (const SourceKey& source : agent.sources) {
        AppendClear(source, event.agent, clears);
        owners_.erase(source);
      }
      agent.sources.clear();
      EvictTombstones();
      return false;
    }
    case PlacementKind::kStored:
    case PlacementKind::kRemoved:
    case PlacementKind::kCleared: {
      if (event.agent.empty()) return true;
      MutexLock lock(&mu_);
      Claim(agents_[event.agent], event.agent, event.source);
      return true;
    }
    case PlacementKind::kWorkerExpired:
      return true;
  }
  return true;
}

void AgentTable::EvictTombstones() {
  size_t tombstones = 0;
  for (const auto& [name, agent] : agents_) tombstones += agent.expired ? 1 : 0;
  while (tombstones > options_.max_tombstones) {
    // The same choice on every replica: the oldest heartbeat, then the name.
    auto oldest = agents_.end();
    for (auto it = agents_.begin(); it != agents_.end(); ++it) {
      if (!it->second.expired || !it->second.sources.empty()) continue;
      if (oldest == agents_.end() ||
          std::tie(it->second.last_heartbeat_position, it->first) <
              std::tie(oldest->second.last_heartbeat_position, oldest->first)) {
        oldest = it;
      }
    }
    if (oldest == agents_.end()) return;
    agents_.erase(oldest);
    --tombstones;
  }
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

std::vector<AgentTable::Lease> AgentTable::Leases() const {
  std::vector<Lease> out;
  MutexLock lock(&mu_);
  for (const auto& [name, agent] : agents_) {
    if (!Live(agent)) continue;
    out.push_back({name, agent.last_heartbeat_position, agent.lease_ms, agent.heartbeat_seen,
                   agent.incarnation, agent.last_msg_seq});
  }
  return out;
}

std::optional<std::string> AgentTable::Owner(const SourceKey& source) const {
  MutexLock lock(&mu_);
  auto it = owners_.find(source);
  if (it == owners_.end()) return std::nullopt;
  return it->second;
}

void AgentTable::Restore(const std::vector<AgentView>& agents,
                         std::chrono::steady_clock::time_point now) {
  MutexLock lock(&mu_);
  agents_.clear();
  owners_.clear();
  resync_.clear();
  // `agents` is sorted by name: should two claim one source (a checkpoint
  // from before ownership), the first keeps it, on every replica.
  for (const AgentView& view : agents) {
    AgentState& agent = agents_[view.agent];
    agent = static_cast<const AgentState&>(view);
    agent.heartbeat_seen = now;
    agent.sources.clear();
    for (const SourceKey& source : view.sources) Claim(agent, view.agent, source);
  }
}

std::vector<AgentTable::ResyncRequest> AgentTable::TakeResyncRequests() {
  MutexLock lock(&mu_);
  std::vector<ResyncRequest> out;
  out.swap(resync_);
  return out;
}

}  // namespace kvindex::consume
