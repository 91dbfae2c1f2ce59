#include "shared/consume/agent_table.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "shared/nats/subjects.h"

namespace kvindex::consume {

void AgentTable::AppendClear(const SourceKey& source, const std::string& name,
                             std::vector<PlacementEvent>* clears) {
  PlacementEvent& clear = clears->emplace_back();
  clear.kind = PlacementKind::kCleared;  // empty model: every model
  clear.source = source;
  clear.agent = name;
}

void AgentTable::FailClosed(AgentState& agent, const std::string& name, uint64_t position,
                            std::vector<PlacementEvent>* clears, std::string_view model) {
  agent.gaps += 1;
  for (const SourceKey& source : agent.sources) {
    AppendClear(source, name, clears);
    clears->back().model = model;
  }
  resync_.push_back({name, position});
}

void AgentTable::FailClosedOn(AgentState& agent, const std::string& name, uint64_t position,
                              const LogSubject& origin, std::vector<PlacementEvent>* clears) {
  if (origin.kind != LogSubject::kEvents) return FailClosed(agent, name, position, clears);
  if (auto it = agent.subjects.find(origin.token);
      it != agent.subjects.end() && !it->second.model.empty()) {
    return FailClosed(agent, name, position, clears, it->second.model);
  }
  // No readable message of the model from this node yet: the token spells
  // the model unless it is the hashed form of a long name, and then the
  // node's model state here (which only its model subject carries) is none.
  StatusOr<std::string> model = nats::DecodeToken(origin.token);
  if (model.ok()) return FailClosed(agent, name, position, clears, *model);
  agent.gaps += 1;
  resync_.push_back({name, position});
}

namespace {

// Live: not expired, or expired and owning sources claimed since (the same
// rule as Leases()).
bool Live(const AgentTable::AgentState& agent) { return !agent.expired || !agent.sources.empty(); }

// What a sender's number says (Sequencing and Incarnations in the header's
// comment), for msg_seq and subject_seq alike.
struct Numbering {
  bool stale = false;        // skip the message
  bool new_process = false;  // another incarnation starts here
  bool lost = false;         // messages before this one are missing
  bool first_seen = false;   // new_process, and the first incarnation seen
};

// Judges number `seq` of incarnation `sent` against a counter's state
// (`incarnation`, `last`; `renumber`: an undecodable message already failed
// closed) and moves the counter unless the message is stale. A message
// numbered 1 of another incarnation starts a new process, lower or higher (a
// restart on a clock behind); a higher incarnation starts one at any number;
// later numbers of a lower incarnation, or at or below the last, are stale.
Numbering Judge(uint64_t& incarnation, uint64_t& last, bool renumber, uint64_t sent, uint64_t seq) {
  Numbering n;
  const bool start = seq == 1 && sent != incarnation;
  if (!start && (sent < incarnation || (sent == incarnation && seq <= last))) {
    n.stale = true;
    return n;
  }
  if (start || sent > incarnation) {
    // Its first message clears its sources itself (start-up clear), so only
    // a hole inside its own numbering is a loss.
    n.new_process = true;
    n.first_seen = incarnation == 0;
    n.lost = seq != 1;
    incarnation = sent;
  } else {
    n.lost = seq != last + 1 && !renumber;
  }
  last = seq;
  return n;
}

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
    // A model subject carries that model's events only (never every
    // model's: a router reading some models' subjects would miss them).
    if (origin.kind == LogSubject::kEvents && nats::ModelToken(event.model) != origin.token) {
      return LogRefusal::kSubjectMismatch;
    }
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
  // A subject the node is not numbered on yet gets state only when the
  // message has something to number (AdmitNumbered): bounded per node.
  if (header.subject_seq != 0 && (origin.kind == LogSubject::kAgent || !events.empty()) &&
      it != agents_.end() && !it->second.subjects.contains(origin.token) &&
      it->second.subjects.size() >= options_.max_subjects_per_node) {
    return LogRefusal::kTooManySubjects;
  }
  uint64_t current = it == agents_.end() ? 0 : it->second.incarnation;
  if (header.subject_seq != 0) {  // the subject follows incarnations on its own
    current = 0;
    if (it != agents_.end()) {
      auto subject = it->second.subjects.find(origin.token);
      if (subject != it->second.subjects.end()) current = subject->second.incarnation;
    }
  }
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
      // What it held was its subject's: that model's, or every model's on
      // the control subject.
      FailClosedOn(it->second, header.agent, message.position, origin, clears);
      it->second.renumber = true;
      if (auto subject = it->second.subjects.find(origin.token);
          subject != it->second.subjects.end()) {
        subject->second.renumber = true;
      }
    }
    return Verdict::kApply;  // nothing to apply but its position
  }
  if (!header.sequenced()) return Verdict::kApply;
  if (header.subject_seq != 0 && origin.kind != LogSubject::kTrusted) {
    return AdmitNumbered(message, events, origin, clears);
  }
  AgentState& agent = agents_[header.agent];
  // A process's first message starts it, whatever its incarnation's value:
  // a restart on a clock behind the previous run's (another host) numbers
  // itself lower and would otherwise be stale for good. Later messages of a
  // lower incarnation are a late (or still running) older process: stale.
  const Numbering n = Judge(agent.incarnation, agent.last_msg_seq, agent.renumber,
                            header.incarnation, header.msg_seq);
  if (n.stale) {
    agent.stale += 1;
    return Verdict::kStale;
  }
  // A new process: its first heartbeat decides what the previous
  // incarnation's sources become.
  if (n.new_process) agent.last_heartbeat_position = 0;
  if (n.lost && n.first_seen) {
    // The log no longer holds the agent's start (retention): what was
    // missed can only be missing stores, so nothing to clear, but the
    // agent's full state is wanted.
    resync_.push_back({header.agent, message.position});
  } else if (n.lost) {
    FailClosed(agent, header.agent, message.position, clears);
  }
  // Whatever the undecodable message held preceded this one and was cleared.
  agent.renumber = false;
  return Verdict::kApply;
}

AgentTable::Verdict AgentTable::AdmitNumbered(const LogBatch::Message& message,
                                              std::span<const PlacementEvent> events,
                                              const LogSubject& origin,
                                              std::vector<PlacementEvent>* clears) {
  const codec::MessageHeader& header = message.header;
  AgentState& agent = agents_[header.agent];
  const bool control = origin.kind == LogSubject::kAgent;
  if (!control && events.empty() && !agent.subjects.contains(origin.token)) {
    // A header alone on a model subject the node sent no events on: no
    // model state to number, so none is kept (any token a node may publish
    // on would otherwise stay in the table). Its first message with events
    // is judged as a first sight (nothing to clear).
    agent.renumber = false;
    agent.last_msg_seq = header.msg_seq;  // informational here
    return Verdict::kApply;
  }
  SubjectState& subject = agent.subjects[origin.token];
  // The same rules as by msg_seq (Admit), on this subject's numbers only.
  const Numbering n = Judge(subject.incarnation, subject.last_seq, subject.renumber,
                            header.incarnation, header.subject_seq);
  if (n.stale) {
    agent.stale += 1;
    return Verdict::kStale;
  }
  if (!control && !events.empty()) subject.model = events.front().model;
  if (n.new_process && control) {
    // Heartbeats travel here: the agent's incarnation is this subject's.
    agent.incarnation = header.incarnation;
    agent.last_heartbeat_position = 0;
  }
  if (n.lost && n.first_seen) {
    resync_.push_back({header.agent, message.position});
  } else if (n.lost) {
    FailClosedOn(agent, header.agent, message.position, origin, clears);
  }
  subject.renumber = false;
  agent.renumber = false;
  agent.last_msg_seq = header.msg_seq;  // informational here
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
