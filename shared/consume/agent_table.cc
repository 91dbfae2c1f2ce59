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
  // What it owns in single models: that model's (all of them on the control
  // subject, each in its model).
  for (const auto& [owned_model, sources] : agent.model_sources) {
    if (!model.empty() && owned_model != model) continue;
    for (const SourceKey& source : sources) {
      AppendClear(source, name, clears);
      clears->back().model = owned_model;
    }
  }
  resync_.push_back({name, position});
}

void AgentTable::ReleaseAll(AgentState& agent, const std::string& name,
                            std::vector<PlacementEvent>* clears) {
  for (const SourceKey& source : agent.sources) {
    AppendClear(source, name, clears);
    owners_.erase(source);
  }
  agent.sources.clear();
  for (const auto& [model, sources] : agent.model_sources) {
    auto owners = model_owners_.find(model);
    for (const SourceKey& source : sources) {
      AppendClear(source, name, clears);
      clears->back().model = model;
      if (owners != model_owners_.end()) owners->second.erase(source);
    }
    if (owners != model_owners_.end() && owners->second.empty()) model_owners_.erase(owners);
  }
  agent.model_sources.clear();
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

const std::string kControlToken = "_agent";

// Live: not expired, or expired and owning sources claimed since (the same
// rule as Leases()).
bool Live(const AgentTable::AgentState& agent) {
  return !agent.expired || !agent.sources.empty() || !agent.model_sources.empty();
}

// Live as judged for a message on `origin` about `model` (empty: none
// known): from what every router reading that subject reads (the control
// subjects and the model's own), never from other models' subjects, so a
// router reading only some models counts the nodes of each as one reading
// all (docs/scaling.md, "Ownership and liveness"). An agent with no
// per-subject numbering (a sender before subject_seq, or the in-process log)
// is present everywhere.
bool LiveOn(const AgentTable::AgentState& agent, const LogSubject& origin,
            const std::string& model) {
  if (!agent.sources.empty()) return true;
  const bool control = origin.kind != LogSubject::kEvents;
  if (!control && !model.empty()) {
    auto it = agent.model_sources.find(model);
    if (it != agent.model_sources.end() && !it->second.empty()) return true;
  }
  if (agent.expired) return false;
  if (agent.subjects.empty() || agent.subjects.contains(kControlToken)) return true;
  return !control && agent.subjects.contains(origin.token);
}

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

AgentTable::AgentState& AgentTable::Find(const std::string& name, uint64_t position) {
  auto [it, inserted] = agents_.try_emplace(name);
  if (inserted) it->second.live_position = position;
  return it->second;
}

bool AgentTable::AtNodeCap(const std::string& node, const LogSubject& origin,
                           const std::string& model) const {
  auto it = agents_.find(node);
  if (it != agents_.end() && LiveOn(it->second, origin, model)) return false;
  size_t live = 0;
  for (const auto& [name, agent] : agents_) live += LiveOn(agent, origin, model) ? 1 : 0;
  return live >= options_.max_nodes;
}

void AgentTable::AppendOwned(const std::string& node, std::string_view model,
                             std::vector<SourceKey>* owned) const {
  MutexLock lock(&mu_);
  if (auto it = agents_.find(node); it != agents_.end()) {
    owned->insert(owned->end(), it->second.sources.begin(), it->second.sources.end());
    if (auto m = it->second.model_sources.find(std::string(model));
        m != it->second.model_sources.end()) {
      owned->insert(owned->end(), m->second.begin(), m->second.end());
    }
  }
}

void AgentTable::Claim(AgentState& agent, const std::string& name, const SourceKey& source,
                       const std::string& model, std::vector<PlacementEvent>* clears) {
  if (auto it = owners_.find(source); it != owners_.end()) {
    // Another node's source reaches here only from the trusted in-process
    // log: the sets of each agent stay its owned sources.
    return;
  }
  if (!model.empty()) {
    auto owners = model_owners_.find(model);
    if (owners == model_owners_.end()) owners = model_owners_.try_emplace(model).first;
    auto [it, inserted] = owners->second.try_emplace(source, name);
    if (!inserted) return;  // its own already, or (trusted log) another's
    auto sources = agent.model_sources.find(model);
    if (sources == agent.model_sources.end()) {
      sources = agent.model_sources.try_emplace(model).first;
    }
    sources->second.insert(source);
    return;
  }
  // Announced (first time): owned in every model from here. Claims of it in
  // single models (the agent's own, or another node's whose events came
  // first) end; the others' entries go with them (every router reads the
  // announcement and clears the same).
  owners_.emplace(source, name);
  agent.sources.insert(source);
  for (auto owners = model_owners_.begin(); owners != model_owners_.end();) {
    auto claim = owners->second.find(source);
    if (claim != owners->second.end()) {
      auto holder = agents_.find(claim->second);
      if (holder != agents_.end()) {
        auto sources = holder->second.model_sources.find(owners->first);
        if (sources != holder->second.model_sources.end()) {
          sources->second.erase(source);
          if (sources->second.empty()) holder->second.model_sources.erase(sources);
        }
      }
      if (claim->second != name) {
        AppendClear(source, claim->second, clears);
        clears->back().model = owners->first;
      }
      owners->second.erase(claim);
    }
    if (owners->second.empty()) {
      model_owners_.erase(owners++);
    } else {
      ++owners;
    }
  }
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
  auto it = agents_.find(node);
  // The model the message is about: its events', else (a header alone) the
  // one the node's messages on this subject carried, else the token's.
  std::string model;
  if (origin.kind == LogSubject::kEvents) {
    if (!events.empty()) {
      model = events.front().model;
    } else if (it != agents_.end()) {
      if (auto subject = it->second.subjects.find(origin.token);
          subject != it->second.subjects.end()) {
        model = subject->second.model;
      }
    }
    if (model.empty()) {
      if (StatusOr<std::string> token = nats::DecodeToken(origin.token); token.ok()) {
        model = *std::move(token);
      }
    }
  }
  if (AtNodeCap(node, origin, model)) return LogRefusal::kTooManyNodes;
  // Sources nobody owns yet that the message would claim (rare: first
  // announcements only).
  absl::flat_hash_set<SourceKey> claims;
  // The lambda is analysed on its own, without mu_: it reads owners_
  // through this pointer, taken here under mu_.
  const auto* owners = &owners_;
  // Claims in the message's model (events on a model subject) are checked
  // against that model's claims too; announcements (the control subject)
  // only against announcements: both are what every router reading the
  // model reads (docs/scaling.md, "Ownership and liveness").
  const absl::flat_hash_map<SourceKey, std::string>* model_owners = nullptr;
  if (origin.kind == LogSubject::kEvents) {
    if (auto m = model_owners_.find(model); m != model_owners_.end()) model_owners = &m->second;
  }
  auto check = [&](const SourceKey& source) -> std::optional<LogRefusal> {
    auto owner = owners->find(source);
    if (owner != owners->end()) {
      if (owner->second != node) return LogRefusal::kForeignSource;
      return std::nullopt;
    }
    if (model_owners != nullptr) {
      auto claim = model_owners->find(source);
      if (claim != model_owners->end()) {
        if (claim->second != node) return LogRefusal::kForeignSource;
        return std::nullopt;
      }
    }
    claims.insert(source);
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
  // Owned in the message's scope: announced, plus the model's own claims.
  size_t owned = 0;
  if (it != agents_.end()) {
    owned = it->second.sources.size();
    if (origin.kind == LogSubject::kEvents) {
      if (auto m = it->second.model_sources.find(model); m != it->second.model_sources.end()) {
        owned += m->second.size();
      }
    }
  }
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
  AgentState& agent = Find(header.agent, message.position);
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
  const bool control = origin.kind == LogSubject::kAgent;
  if (!control && events.empty() && !agents_.contains(header.agent)) {
    // A header alone on a model subject from a node unknown here: nothing
    // to number nor to keep (a router not reading this subject keeps
    // nothing either, so the nodes counted against --max-nodes agree).
    return Verdict::kApply;
  }
  AgentState& agent = Find(header.agent, message.position);
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
      AgentState& agent = Find(event.agent, position);
      if (!Live(agent)) {  // expired: a new life starts here
        agent.live_position = position;
        agent.heartbeated = false;
      }
      for (const SourceKey& source : event.sources)
        Claim(agent, event.agent, source, std::string(), clears);
      if (agent.last_heartbeat_position == 0) {
        // The incarnation's first heartbeat: what it does not list is
        // nothing this process follows (any more).
        auto listed = [&](const SourceKey& source) {
          return std::find(event.sources.begin(), event.sources.end(), source) !=
                 event.sources.end();
        };
        for (auto it = agent.sources.begin(); it != agent.sources.end();) {
          if (listed(*it)) {
            ++it;
            continue;
          }
          AppendClear(*it, event.agent, clears);
          owners_.erase(*it);
          it = agent.sources.erase(it);
        }
        // (Listed ones it claimed in single models are announced now.)
        for (const auto& [model, sources] : agent.model_sources) {
          auto owners = model_owners_.find(model);
          for (const SourceKey& source : sources) {
            AppendClear(source, event.agent, clears);
            clears->back().model = model;
            if (owners != model_owners_.end()) owners->second.erase(source);
          }
          if (owners != model_owners_.end() && owners->second.empty()) model_owners_.erase(owners);
        }
        agent.model_sources.clear();
      }
      agent.heartbeated = true;
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
      if (!Live(agent)) return false;
      if (agent.last_heartbeat_position > event.heartbeat_seq) return false;
      agent.expired = true;
      agent.expiries += 1;
      ReleaseAll(agent, event.agent, clears);
      EvictTombstones();
      return false;
    }
    case PlacementKind::kStored:
    case PlacementKind::kRemoved:
    case PlacementKind::kCleared: {
      if (event.agent.empty()) return true;
      MutexLock lock(&mu_);
      AgentState& agent = Find(event.agent, position);
      const bool live = Live(agent);
      Claim(agent, event.agent, event.source, event.model, clears);
      if (!live && Live(agent)) {  // expired, claiming again: a new life
        agent.live_position = position;
        agent.heartbeated = false;
      }
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
      if (Live(it->second)) continue;
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
    out.push_back({name, agent.last_heartbeat_position, agent.lease_ms, agent.heartbeated,
                   agent.heartbeat_seen, agent.live_position});
  }
  return out;
}

std::optional<std::string> AgentTable::Owner(const SourceKey& source,
                                             std::string_view model) const {
  MutexLock lock(&mu_);
  if (auto it = owners_.find(source); it != owners_.end()) return it->second;
  std::optional<std::string> owner;
  for (const auto& [name, owners] : model_owners_) {
    if (!model.empty() && name != model) continue;
    auto it = owners.find(source);
    if (it != owners.end() && (!owner || it->second < *owner)) owner = it->second;
  }
  return owner;
}

void AgentTable::Restore(const std::vector<AgentView>& agents,
                         std::chrono::steady_clock::time_point now) {
  MutexLock lock(&mu_);
  agents_.clear();
  owners_.clear();
  resync_.clear();
  // `agents` is sorted by name: should two claim one source (a checkpoint
  // from before ownership), the first keeps it, on every replica.
  std::vector<PlacementEvent> unused;
  for (const AgentView& view : agents) {
    AgentState& agent = agents_[view.agent];
    agent = static_cast<const AgentState&>(view);
    agent.heartbeat_seen = now;
    agent.sources.clear();
    agent.model_sources.clear();
    for (const SourceKey& source : view.sources) {
      if (owners_.try_emplace(source, view.agent).second) agent.sources.insert(source);
    }
  }
  // Then the claims in single models (none of an announced source).
  for (const AgentView& view : agents) {
    AgentState& agent = agents_[view.agent];
    for (const auto& [model, sources] : view.model_sources) {
      for (const SourceKey& source : sources) Claim(agent, view.agent, source, model, &unused);
    }
  }
}

std::vector<AgentTable::ResyncRequest> AgentTable::TakeResyncRequests() {
  MutexLock lock(&mu_);
  std::vector<ResyncRequest> out;
  out.swap(resync_);
  return out;
}

}  // namespace kvindex::consume
