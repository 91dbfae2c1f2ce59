// LivenessMonitor: the router-local clock side of liveness (semantics.md
// section 7). The decision itself is made from the log (AgentTable); this
// thread only proposes it: when an agent's last applied heartbeat is older
// than its lease by this router's clock, it appends agent_expired(agent,
// heartbeat position) to the log. Every replica proposes the same message id
// for the same heartbeat, so JetStream keeps one; each replica then applies
// it at the same position. The lease is the agent's, bounded by
// LivenessOptions::max_lease (router configuration, not the sender's). An
// expiry that did not take effect within a lease of being proposed (its id
// taken in advance by another message, or lost) is proposed again under a
// fresh, unpredictable id (docs/security.md). A node that never heartbeated
// (it only published) is granted max_lease from when this monitor first saw
// it, then expired the same way, so it cannot keep a --max-nodes slot
// (AgentTableOptions::max_nodes) for good. It also appends the
// AgentTable's resync requests (an agent whose messages were lost), so the
// agent republishes snapshots. Nothing is proposed while the router is
// still catching up with the log. It reads only the table's leases
// (AgentTable::Leases), never the agents' source sets.
//
//   LivenessMonitor monitor(&loop, append, {});
//   monitor.Start(); ... monitor.Stop();
//
// Thread safety: Start/Stop from one controlling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/base/status.h"
#include "shared/base/stop_signal.h"
#include "shared/consume/apply_loop.h"

namespace kvindex::consume {

struct LivenessOptions {
  // How often agents are checked. Default: 250 ms.
  std::chrono::milliseconds interval{250};
  // Longest lease honoured, whatever an agent announces (kvindex-router
  // --max-lease). Default: 5 min.
  std::chrono::milliseconds max_lease{std::chrono::minutes(5)};
};

class LivenessMonitor {
 public:
  // Appends `events` as one unsequenced log message on the control subject of
  // `agent`, de-duplicated by `msg_id`.
  using Append = std::function<Status(const std::string& agent, const std::string& msg_id,
                                      const std::vector<PlacementEvent>& events)>;

  // `loop` and `probe` (nullable) must outlive the monitor.
  LivenessMonitor(ApplyLoop* loop, RouterProbe* probe, Append append, LivenessOptions options);
  ~LivenessMonitor();

  void Start();
  void Stop();
  // One check now (tests; the thread calls it every interval).
  void CheckOnce(std::chrono::steady_clock::time_point now);

 private:
  void Run();

  ApplyLoop* const loop_;
  RouterProbe* const probe_;
  const Append append_;
  const LivenessOptions options_;
  // Expiries proposed for agents still past their lease (this thread).
  struct Proposal {
    uint64_t heartbeat_position = 0;
    std::chrono::steady_clock::time_point at{};
    uint32_t attempts = 0;
  };
  absl::flat_hash_map<std::string, Proposal> proposed_;
  // Live nodes that never heartbeated: when this monitor first saw each.
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point> unannounced_;
  // Makes this router's re-proposal ids unpredictable to other clients.
  const std::string nonce_;
  std::vector<AgentTable::ResyncRequest> resync_;  // not appended yet (this thread)
  std::thread thread_;
  StopSignal stop_;
};

}  // namespace kvindex::consume
