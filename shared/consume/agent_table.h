// AgentTable: what the router knows about each publishing agent, derived
// from the ordered log only, so every replica at the same log position holds
// the same table and takes the same decisions (semantics.md sections 6-7).
//
// Two decisions are made here:
//   - Sequencing (docs/events.md, "Message"): an agent numbers its messages
//     1, 2, 3, ... per incarnation. A message whose msg_seq is at or below
//     the last applied one of that incarnation (a late retry, a duplicate
//     outside JetStream's window), or of an older incarnation, is stale and
//     skipped. A message after a gap (a lost message may have removed
//     blocks) or an undecodable one first clears every source the agent
//     announced: fail closed, the agent republishes snapshots.
//   - Liveness: an agent_expired(agent, heartbeat_seq) event clears every
//     source of the agent unless a heartbeat of the agent applied at a
//     position above heartbeat_seq precedes it in the log.
// The table also records, per agent, the router-local time its last
// heartbeat was applied; only the LivenessMonitor reads that (to decide when
// to append an agent_expired), never a replica's state.
//
//   AgentTable agents;
//   std::vector<PlacementEvent> clears;
//   if (agents.Admit(message, &clears) == AgentTable::Verdict::kStale) skip;
//   for (event : message events) agents.Observe(event, position, now, &clears);
//
// Thread safety: Admit/Observe from the apply thread; Agents() and
// TakeResyncRequests() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/consume/log_reader.h"
#include "shared/model/placement_event.h"
#include "shared/model/source_key.h"

namespace kvindex::consume {

class AgentTable {
 public:
  enum class Verdict { kApply, kStale };

  struct AgentState {
    uint64_t incarnation = 0;
    uint64_t last_msg_seq = 0;
    uint64_t last_heartbeat_position = 0;  // 0: no heartbeat applied yet
    uint32_t lease_ms = 0;
    bool expired = false;
    // Ordered, so clears go out in one order on every replica.
    absl::btree_set<SourceKey> sources;
    uint64_t gaps = 0;      // messages after a gap, and undecodable ones
    uint64_t stale = 0;     // messages skipped as stale
    uint64_t expiries = 0;  // agent_expired events that cleared it
    // Router-local; not part of the replicated state.
    std::chrono::steady_clock::time_point heartbeat_seen{};
  };
  struct AgentView : AgentState {
    std::string agent;
  };

  // Checks a message's sender sequence before its events are applied. On a
  // gap (or an undecodable message from a known node) appends one kCleared
  // (every model) per known source of the agent to *clears, which must be
  // applied before the message's events, and queues a resync request.
  Verdict Admit(const LogBatch::Message& message, std::vector<PlacementEvent>* clears);

  // Bookkeeping per event of an admitted message, in order. Heartbeats renew
  // the agent; stored/removed/cleared record their source as the agent's;
  // agent_expired is decided here: when it expires the agent, one kCleared
  // per source is appended to *clears (to be applied in the event's place).
  // Returns true when the event itself should reach the index.
  bool Observe(const PlacementEvent& event, uint64_t position,
               std::chrono::steady_clock::time_point now, std::vector<PlacementEvent>* clears);

  std::vector<AgentView> Agents() const;  // sorted by agent

  // Replaces the table with a checkpoint's (apply thread, before the first
  // message). The router-local heartbeat time restarts at `now`: a restarted
  // router grants every agent a full lease before proposing its expiry.
  void Restore(const std::vector<AgentView>& agents, std::chrono::steady_clock::time_point now);

  // Agents whose sources were cleared for a gap since the last call, with
  // the log position of the decision (the router asks them for snapshots).
  struct ResyncRequest {
    std::string agent;
    uint64_t position = 0;
  };
  std::vector<ResyncRequest> TakeResyncRequests();

 private:
  static void AppendClears(const AgentState& agent, const std::string& name,
                           std::vector<PlacementEvent>* clears);
  void FailClosed(AgentState& agent, const std::string& name, uint64_t position,
                  std::vector<PlacementEvent>* clears) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  absl::flat_hash_map<std::string, AgentState> agents_ ABSL_GUARDED_BY(mu_);
  std::vector<ResyncRequest> resync_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::consume
