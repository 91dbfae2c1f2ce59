// AgentTable: what the router knows about each publishing agent, derived
// from the ordered log only, so every replica at the same log position holds
// the same table and takes the same decisions (semantics.md sections 6-7).
//
// Four decisions are made here:
//   - Authority (docs/security.md, "The log"): a message read from NATS
//     speaks only for the node its subject names (LogSubject). Its header
//     must name that node, every event must be the node's own, of a kind
//     the subject may carry, and about sources the node owns: a source is
//     owned by the node that first announced it in a heartbeat (in every
//     model), else by the node whose event on a model's subject first named
//     it (in that model only), until that node expires; a heartbeat's
//     endpoints name only sources that heartbeat lists. Every decision about
//     a model's message (ownership, --max-nodes, max_sources_per_node) reads
//     only state built from that model's subject and the control subjects,
//     so a router reading only some models' subjects decides alike
//     (docs/scaling.md, "Ownership and liveness"). Anything else is
//     refused whole (LogRefusal), before the table or the index changes. A
//     new incarnation more than max_incarnation_ahead past the time the log
//     stored its message is refused too: one forged message cannot number a
//     node into silence. The in-process log (no subject) is the router's
//     own embedded agent's and is trusted.
//   - Sequencing (docs/events.md, "Message" and "Numbering"): an agent
//     numbers its messages 1, 2, 3, ... per incarnation, and each of its
//     subjects on its own (subject_seq). Gaps are judged per (agent,
//     subject) when the message carries subject_seq, by msg_seq otherwise
//     (agents from before the field). A message whose number is at or below
//     the last applied one of that incarnation (a late retry, a duplicate
//     outside JetStream's window), or of an older incarnation, is stale and
//     skipped. A message after a gap (a lost message may have removed
//     blocks) or an undecodable one first clears the agent's sources (fail
//     closed, the agent republishes snapshots): in the subject's model for
//     a model subject, in every model for the agent's control subject (and
//     for msg_seq gaps). So a model's state depends only on its own
//     subject's, the control subject's and the expiry subject's messages: a
//     router reading only those (FilteredLogReader) judges it as one reading
//     every message. A model subject carries only that model's events.
//   - Incarnations: a message numbered 1 of another incarnation than the
//     current one starts a new process, lower or higher (a restart on a
//     clock behind); a higher incarnation starts one at any msg_seq (its
//     start no longer in the log: fail closed), so one message cannot
//     silence a node whose process goes on. With subject_seq each subject
//     follows the incarnations on its own and the control subject's is the
//     agent's (heartbeats travel there). The first heartbeat of a new
//     incarnation decides what the previous incarnation's sources become:
//     those it does not list are cleared and released (a source the
//     restarted agent no longer follows, or a rank learned from envelopes,
//     never stays in the index).
//   - Liveness: an agent_expired(agent, heartbeat_seq) event clears and
//     releases every source of the agent unless a heartbeat of the agent
//     applied at a position above heartbeat_seq precedes it in the log. The
//     expired agent stays as a tombstone (its numbering, no sources), at most
//     max_tombstones of them: past it the one with the oldest heartbeat goes.
// The table also records, per agent, the router-local time its last
// heartbeat was applied; only the LivenessMonitor reads that (Leases(), to
// decide when to append an agent_expired), never a replica's state.
//
//   AgentTable agents;
//   std::vector<PlacementEvent> clears;
//   LogRefusal why;
//   if (agents.Admit(message, events, &clears, &why) != AgentTable::Verdict::kApply) skip;
//   for (event : message events) agents.Observe(event, position, now, &clears);
//
// Thread safety: Admit/Observe/Restore from the apply thread; Agents(),
// Leases(), Owner() and TakeResyncRequests() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/consume/log_reader.h"
#include "shared/consume/log_refusal.h"
#include "shared/consume/log_subject.h"
#include "shared/model/placement_event.h"
#include "shared/model/source_key.h"

namespace kvindex::consume {

struct AgentTableOptions {
  // How far a new incarnation (its process start, ns since the epoch) may be
  // ahead of the time JetStream stored its message; further is refused
  // (incarnation_ahead). Covers clock skew between agents and the NATS
  // servers. Default: 10 min.
  std::chrono::nanoseconds max_incarnation_ahead = std::chrono::minutes(10);
  // Most sources one node may own: a message that would make it own more is
  // refused (too_many_sources), so one node cannot fill a model's source
  // ids (4,096) with made-up workers. Default: 256.
  size_t max_sources_per_node = 256;
  // Most subjects ("_agent" and model tokens) one node is numbered on: a
  // message on a new one past it is refused (too_many_subjects), so the
  // tokens a node may publish on cannot grow the table (and every
  // checkpoint) without bound. Default: 64.
  size_t max_subjects_per_node = 64;
  // Most live nodes, counted per model (owning announced sources or sources
  // in the model, or not expired and numbered on the control subject or the
  // model's): a message from a node that is not live for its model while
  // this many are is refused whole (too_many_nodes). Also sizes a node's
  // guaranteed share of a model (SourceQuota). Router --max-nodes.
  // Default: 256.
  size_t max_nodes = 256;
  // Expired agents kept as tombstones (a late message of theirs stays
  // stale). Default: 4096.
  size_t max_tombstones = 4096;
};

class AgentTable {
 public:
  enum class Verdict { kApply, kStale, kRefused };

  // Per (agent, subject token) numbering (docs/events.md, "Numbering").
  struct SubjectState {
    uint64_t incarnation = 0;
    uint64_t last_seq = 0;  // last subject_seq applied of `incarnation`
    // A model subject: the model its messages carry (what a gap clears).
    std::string model;
    // As AgentState::renumber, per subject. Checkpointed (format v5).
    bool renumber = false;
  };
  struct AgentState {
    uint64_t incarnation = 0;
    uint64_t last_msg_seq = 0;
    // 0: no heartbeat of the current incarnation applied yet (its first
    // heartbeat decides what the previous incarnation's sources become).
    uint64_t last_heartbeat_position = 0;
    uint32_t lease_ms = 0;  // as announced; the monitor bounds it (--max-lease)
    bool expired = false;
    // The sources the agent owns in every model, ordered, so clears go out
    // in one order on every replica: announced in its heartbeats (or in a
    // clear of every model) on the control subject, which every router
    // reads, or claimed on the trusted in-process log. Empty once expired.
    absl::btree_set<SourceKey> sources;
    // Sources claimed by the agent's events on one model's subject and not
    // announced: owned in that model only, by model. A router reading only
    // some models' subjects holds exactly their part (docs/scaling.md,
    // "Ownership and liveness"). Empty once expired.
    absl::btree_map<std::string, absl::btree_set<SourceKey>> model_sources;
    // The log position of the message that made the agent live (its first
    // admitted one, or its first after an expiry): the same on every replica
    // reading its subjects; names the expiry of a node that never
    // heartbeated. 0 in checkpoints before format v6.
    uint64_t live_position = 0;
    // A heartbeat was applied since the agent became live (whatever its
    // lease_ms, 0 included).
    bool heartbeated = false;
    uint64_t gaps = 0;      // messages after a gap, and undecodable ones
    uint64_t stale = 0;     // messages skipped as stale
    uint64_t expiries = 0;  // agent_expired events that cleared it
    // An undecodable message (no readable msg_seq) already failed closed:
    // the next message of the incarnation takes up the numbering without a
    // second clear. Checkpointed (format v5): a replica restored in between
    // judges the next message as one that read the whole log.
    bool renumber = false;
    // Subjects the agent numbers with subject_seq, by token ("_agent" or a
    // model token).
    absl::btree_map<std::string, SubjectState> subjects;
    // Router-local; not part of the replicated state.
    std::chrono::steady_clock::time_point heartbeat_seen{};
  };
  struct AgentView : AgentState {
    std::string agent;
  };

  explicit AgentTable(AgentTableOptions options = {}) : options_(options) {}

  // Checks a message before its events are applied: kRefused (with *refusal
  // set) when it may not speak for what it says (see the file comment),
  // kStale when its sender sequence is old. On a gap (or an undecodable
  // message from a known node) appends one kCleared (every model) per source
  // of the agent to *clears, which must be applied before the message's
  // events, and queues a resync request.
  Verdict Admit(const LogBatch::Message& message, std::span<const PlacementEvent> events,
                std::vector<PlacementEvent>* clears, LogRefusal* refusal);
  // The same for a message without events (its header alone).
  Verdict Admit(const LogBatch::Message& message, std::vector<PlacementEvent>* clears) {
    LogRefusal unused;
    return Admit(message, {}, clears, &unused);
  }

  // Bookkeeping per event of an admitted message, in order. Heartbeats renew
  // the agent (the first of an incarnation clears the previous one's
  // sources it does not list); heartbeats and stored/removed/cleared claim
  // their sources for the agent; agent_expired is decided here. Clears are
  // appended to *clears (to be applied after the event). Returns true when
  // the event itself should reach the index.
  bool Observe(const PlacementEvent& event, uint64_t position,
               std::chrono::steady_clock::time_point now, std::vector<PlacementEvent>* clears);

  std::vector<AgentView> Agents() const;  // sorted by agent

  // What the LivenessMonitor needs of each live agent. A node that never
  // heartbeated (lease_ms 0: it only published events or headers) is listed
  // too, so it cannot keep its --max-nodes slot for good: the monitor grants
  // it the router's max_lease from when it first saw it.
  struct Lease {
    std::string agent;
    uint64_t heartbeat_position = 0;  // 0: none of the current incarnation yet
    uint32_t lease_ms = 0;            // as last announced
    bool heartbeated = false;         // false: never heartbeated since live
    std::chrono::steady_clock::time_point heartbeat_seen{};
    // Where the agent became live (AgentState::live_position): names the
    // expiry of a node that never heartbeated, the same id on every replica,
    // a fresh one for each of its lives.
    uint64_t live_position = 0;
  };
  std::vector<Lease> Leases() const;

  // The node owning `source` in every model, else in `model` (empty: in
  // any model, the first node by name), if any.
  std::optional<std::string> Owner(const SourceKey& source, std::string_view model = {}) const;

  // Appends the sources `node` owns in `model` to *owned (SourceQuota).
  void AppendOwned(const std::string& node, std::string_view model,
                   std::vector<SourceKey>* owned) const;

  // Replaces the table with a checkpoint's (apply thread, before the first
  // message). Ownership is rebuilt from the agents' source sets. The
  // router-local heartbeat time restarts at `now`: a restarted router grants
  // every agent a full lease before proposing its expiry.
  void Restore(const std::vector<AgentView>& agents, std::chrono::steady_clock::time_point now);

  // Agents whose sources were cleared for a gap since the last call, with
  // the log position of the decision (the router asks them for snapshots).
  struct ResyncRequest {
    std::string agent;
    uint64_t position = 0;
  };
  std::vector<ResyncRequest> TakeResyncRequests();

 private:
  std::optional<LogRefusal> Authorize(const LogBatch::Message& message,
                                      std::span<const PlacementEvent> events,
                                      const LogSubject& origin) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when `node` is not live for a message on `origin` about `model`
  // and max_nodes nodes are (counted the same way).
  bool AtNodeCap(const std::string& node, const LogSubject& origin, const std::string& model) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Claims `source` for `name`: in every model when `model` is empty (then
  // the agent's own claims of it in single models are folded in and other
  // nodes' are cleared (appended to *clears) and released), else in `model`
  // unless the agent already owns it in every model.
  void Claim(AgentState& agent, const std::string& name, const SourceKey& source,
             const std::string& model, std::vector<PlacementEvent>* clears)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Clears (appended to *clears, `model` empty: every model) and releases
  // every source `agent` owns.
  void ReleaseAll(AgentState& agent, const std::string& name, std::vector<PlacementEvent>* clears)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void AppendClear(const SourceKey& source, const std::string& name,
                          std::vector<PlacementEvent>* clears);
  // `model` empty: every model.
  void FailClosed(AgentState& agent, const std::string& name, uint64_t position,
                  std::vector<PlacementEvent>* clears, std::string_view model = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailClosed for a loss on `origin`'s subject: the subject's model (every
  // model for the control subject).
  void FailClosedOn(AgentState& agent, const std::string& name, uint64_t position,
                    const LogSubject& origin, std::vector<PlacementEvent>* clears)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sequencing by subject_seq (see the file comment).
  Verdict AdmitNumbered(const LogBatch::Message& message, std::span<const PlacementEvent> events,
                        const LogSubject& origin, std::vector<PlacementEvent>* clears)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictTombstones() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The agent's state, created (live from `position`) if new.
  AgentState& Find(const std::string& name, uint64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AgentTableOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, AgentState> agents_ ABSL_GUARDED_BY(mu_);
  // source -> owning node in every model; exactly the union of the agents'
  // `sources`.
  absl::flat_hash_map<SourceKey, std::string> owners_ ABSL_GUARDED_BY(mu_);
  // model -> source -> owning node in that model; exactly the union of the
  // agents' `model_sources`.
  absl::flat_hash_map<std::string, absl::flat_hash_map<SourceKey, std::string>> model_owners_
      ABSL_GUARDED_BY(mu_);
  std::vector<ResyncRequest> resync_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::consume
