// AgentPipeline: the ingest agent's engine side, as a library. It subscribes
// to every configured engine KV-event stream, keeps each source's sequence
// state (SourceSession), normalizes batches (normalize::SourceProcessor),
// stamps the placement events and hands them to a PlacementPublisher.
//
// Used by kvindex-agent (publisher: JetStream, or --output jsonl) and by
// kvindex-router --embedded (publisher: InProcessSink).
//
//   AgentOptions options;
//   options.node = "node-a";
//   KVINDEX_ASSIGN_OR_RETURN(options.sources, ParseSourceSpec("worker=w0,engine=vllm,..."));
//   InProcessSink sink;
//   AgentPipeline pipeline(options, &sink, &registry);
//   KVINDEX_RETURN_IF_ERROR(pipeline.Start());
//   ... pipeline.Ready() ...
//   pipeline.Stop();
//
// Threading (see README.md): one I/O thread per source owns that source's
// SUB socket, replay DEALER and SourceProcessor, so a slow replay (bounded by
// replay_timeout) stalls only its own source; one heartbeat thread. Publish
// calls are serialized by one mutex, which is also what makes event_id
// strictly increasing in publish order across sources.
//
// Thread safety: Start/Stop from one controlling thread (both idempotent;
// Start after Stop starts again with fresh source state). Ready and Sources
// may be called from any thread at any time.
// Invariants: every PlacementEvent published carries agent = options.node,
// an event_id greater than every earlier one (also across Start/Stop: ids
// start from the wall clock in ns), and the wall-clock timestamp_ns of its
// stamping. Each engine batch's events go out in one Publish call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/ingest/source_spec.h"
#include "shared/model/ingest_status.h"
#include "shared/model/source_key.h"
#include "shared/model/tier.h"
#include "shared/publish/publisher.h"

namespace prometheus {
class Registry;
}

namespace kvindex::ingest {

struct AgentOptions {
  // Agent node id, stamped into every event. Required. Not reloadable.
  std::string node;
  // Engine publishers to follow; at least one. Not reloadable.
  std::vector<SourceSpec> sources;
  // Longest silence of a replay server before a replay attempt fails.
  // Default: 2 s.
  std::chrono::milliseconds replay_timeout{2000};
  // Minimum time between the end of a gap replay attempt and the next one;
  // a gap inside it clears the source. Default: 1 s.
  std::chrono::milliseconds replay_cooldown{1000};
  // Lease announced in heartbeats, in ms: routers expire the agent's sources
  // after this long without one. Default: 30 s.
  uint32_t heartbeat_lease_ms = 30000;
  // Interval between heartbeats; 0 = a third of the lease. Default: 0.
  std::chrono::milliseconds heartbeat_interval{0};
  // SUB socket receive high-water mark, in messages (the engines' PUB HWM).
  // Default: 100000.
  int receive_hwm = 100000;
  // Largest inbound ZMQ message (ZMQ_MAXMSGSIZE on the SUB socket and the
  // replay DEALER), in bytes; -1 = no limit. libzmq drops the connection
  // that sends a larger one without reading it whole: the source sees a
  // disconnect (kvindex_agent_sub_disconnects_total), then a sequence gap
  // and a replay, which meets the same limit. Default: 64 MiB.
  int64_t max_message_bytes = int64_t{64} << 20;
  // Blocks one source (worker, dp_rank) may hold per tier; past it stored
  // events on that tier are dropped (kvindex_agent_events_dropped_total
  // {reason="block_cap"}, counted in blocks, and a rate-limited warning)
  // until removals bring it under again. Bounds the agent's and the
  // index's memory per source (~155 B per block). 0 = no cap.
  // Default: 16 Mi.
  uint64_t max_blocks_per_tier = uint64_t{16} << 20;

  // InvalidArgument naming the offending field: empty node or sources, bad
  // spec fields, non-positive timeouts, a model with two block sizes, two
  // sources on the same pub endpoint.
  Status Validate() const;
};

// One source's saved state (SourceSession::SaveState), keyed by its spec
// (FormatSourceSpec): a changed spec never resumes an old state.
struct SavedSource {
  std::string key;
  std::string state;
};

// What resumed sources say they hold, per (model, worker, dp_rank, tier),
// summed over sources sharing a worker and rank.
struct HeldBlocks {
  std::string model;
  SourceKey source;
  Tier tier = Tier::kDevice;
  uint64_t blocks = 0;
};

class AgentPipeline {
 public:
  // `publisher` must outlive the pipeline; `registry` may be null (no
  // metrics) and must outlive it otherwise.
  AgentPipeline(AgentOptions options, PlacementPublisher* publisher,
                prometheus::Registry* registry);
  ~AgentPipeline();  // Stop()s
  AgentPipeline(const AgentPipeline&) = delete;
  AgentPipeline& operator=(const AgentPipeline&) = delete;

  // Validates the options, opens every SUB socket (connect, or bind for
  // `bind:`), publishes "cleared" for each source, then starts the I/O
  // threads, which replay from seq 0 and follow the live streams. Returns
  // once the clears are published (not after the replays: see Ready()).
  // InvalidArgument: bad options or endpoint; Unavailable: bind failed.
  // No-op when running.
  Status Start();
  // Stops and joins every thread and closes the sockets. Idempotent. Events
  // of a Publish call still retrying are dropped (logged).
  void Stop();

  // True while running once every source finished its start-up replay
  // attempt (successful or not).
  bool Ready() const;

  // Before Start: states to continue from (kvindex-router --embedded after a
  // restart from a checkpoint whose log already holds their placements). A
  // source with a state publishes no start-up clear and replays from its
  // last seq + 1; one without starts afresh. `consistent` is shown what the
  // resumed sources hold; when it answers false (the log does not hold the
  // same), every source starts afresh: fail closed. Used by the next Start only.
  void SetResumeStates(std::vector<SavedSource> states,
                       std::function<bool(const std::vector<HeldBlocks>&)> consistent);
  // Parks every source thread between two engine batches (the engines'
  // messages wait in the socket buffers), so that everything the sources
  // published is in the publisher and nothing more comes: true once all are
  // parked; false after `timeout` (nothing stays paused then). Controlling
  // thread; ResumeSources ends it.
  bool PauseSources(std::chrono::milliseconds timeout);
  // While paused (any thread): every source's state.
  std::vector<SavedSource> SaveSources() const;
  void ResumeSources();
  // Sources that continued from a saved state at the last Start.
  size_t resumed_sources() const;

  // Asks the sources to republish their state as snapshots (docs/events.md,
  // "Source snapshots"): every source when `all`, else those whose worker is
  // named in `sources`. Each source's own thread publishes its snapshot
  // within about 100 ms, between two engine batches. Any thread.
  // Counted in kvindex_agent_snapshots_total.
  void RequestSnapshots(bool all, const std::vector<SourceKey>& sources);

  using SourceStatus = IngestSourceStatus;
  // One entry per configured source, in configuration order.
  std::vector<SourceStatus> Sources() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvindex::ingest
