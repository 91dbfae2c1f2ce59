// JetStreamPublisher: the PlacementPublisher of kvindex-agent --nats. Sits
// beside InProcessSink behind the same interface.
//
//   JetStreamPublisher publisher(connection->raw(), {.node = "node-a"}, &registry);
//   publisher.SetResyncHandler([&](const ResyncRequest& r) { pipeline.RequestSnapshots(r); });
//   KVINDEX_RETURN_IF_ERROR(publisher.Start());
//   AgentPipeline pipeline(options, &publisher, &registry);
//
// Batching: events are grouped per subject (one per model, plus the agent's
// control subject) and sealed into one message at max_batch_bytes or after
// max_delay, whichever comes first. Every sealed message gets the next
// msg_seq of this incarnation and the Nats-Msg-Id "<node>:<incarnation>:
// <msg_seq>", stable across retries, so JetStream drops duplicates.
//
// Sending: one sender thread publishes asynchronously, in msg_seq order,
// with at most max_in_flight messages unacknowledged, and only while
// connected. A failed or timed-out message is sent again with the same id,
// followed by everything after it; since a later message may have landed
// before the retry, routers see a gap and clear this agent's sources (fail
// closed), and the publisher asks for snapshots of every source once the
// backlog is acknowledged.
//
// Buffering while NATS is unreachable: unacknowledged bytes are bounded by
// buffer_bytes. Past it, events are dropped per source: the source is marked
// (one "cleared" for it is still queued, so routers undercount instead of
// keeping blocks whose removal was dropped), its further events are dropped,
// and once the backlog fits again the resync handler is asked for a snapshot
// of it. The mark ends when a "cleared" of the source is published (the
// snapshot's first event).
//
// Thread safety: Publish/Flush from any thread.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/btree_set.h"
#include "shared/base/mutex.h"
#include "shared/codec/placement_codec.h"
#include "shared/nats/subjects.h"
#include "shared/publish/publisher.h"

namespace prometheus {
class Registry;
}

namespace kvindex {

struct JetStreamPublisherOptions {
  // Agent node id (message header, subjects, message ids). Required.
  std::string node;
  // This process's incarnation; 0 = the wall clock in ns at construction.
  uint64_t incarnation = 0;
  // Subject scheme of the placement stream. Default: prefix "kvindex.events".
  nats::SubjectScheme subjects;
  // A message is sealed once its events reach this many bytes. Default: 1 MiB.
  size_t max_batch_bytes = size_t{1} << 20;
  // ... or once its first event waited this long. Default: 2 ms.
  std::chrono::microseconds max_delay{2000};
  // Messages sent and not acknowledged at most. Default: 64.
  size_t max_in_flight = 64;
  // Unacknowledged bytes held at most (sealed and open batches). Default: 64 MiB.
  size_t buffer_bytes = size_t{64} << 20;
  // A message not acknowledged within this time is sent again. Default: 5 s.
  std::chrono::milliseconds ack_timeout{5000};

  Status Validate() const;
};

// What the publisher asks of the agent pipeline: fresh snapshots.
struct ResyncRequest {
  bool all = false;                // every source (a retry may have reordered messages)
  std::vector<SourceKey> sources;  // else these (their events overflowed the buffer)
};

class JetStreamPublisher final : public PlacementPublisher {
 public:
  // `connection` must outlive the publisher; `registry` is nullable.
  JetStreamPublisher(natsConnection* connection, JetStreamPublisherOptions options,
                     prometheus::Registry* registry);
  ~JetStreamPublisher() override;
  JetStreamPublisher(const JetStreamPublisher&) = delete;
  JetStreamPublisher& operator=(const JetStreamPublisher&) = delete;

  // Called from the sender thread; must not call back into the publisher's
  // Flush. Set before Start.
  void SetResyncHandler(std::function<void(const ResyncRequest&)> handler);

  Status Start();
  // Stops the sender; what is not acknowledged yet is dropped (logged).
  void Stop();

  // Queues the events; never blocks on NATS. Unavailable after Stop.
  Status Publish(std::span<const PlacementEvent> events) override;
  // Holds messages back (buffered, bounded as ever) until the stream is known
  // to exist; the agent clears it before its background stream setup and
  // sets it once EnsureStream succeeded. Default: ready.
  void SetStreamReady(bool ready);
  // Seals open batches and waits until every message so far is acknowledged
  // (or Stop).
  Status Flush() override;

  uint64_t incarnation() const { return options_.incarnation; }
  size_t buffered_bytes() const;
  // Messages acknowledged by JetStream so far.
  uint64_t acked() const;

 private:
  struct Probe;
  struct OpenBatch {
    std::vector<PlacementEvent> events;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point first{};
  };
  struct Outgoing {
    uint64_t msg_seq = 0;
    std::string subject;
    std::string data;
    std::chrono::steady_clock::time_point sealed{};
    std::chrono::steady_clock::time_point sent{};
    bool in_flight = false;
    bool acked = false;
  };

  static void OnAck(jsCtx* js, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error, void* closure);
  void HandleAck(natsMsg* msg, bool ok, const char* error_text);
  // False when the acknowledgement matched no message in flight.
  bool RecordAck(uint64_t msg_seq, bool ok, const char* error_text);

  void Run();
  void PublishLocked(std::span<const PlacementEvent> events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string SubjectFor(const PlacementEvent& event) const;
  // A stored/removed event too large for one message, as consecutive pieces.
  void AppendSplitLocked(const PlacementEvent& event, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds one event to its subject's open batch, sealing it first when the
  // event would not fit and after when full.
  void AppendLocked(const PlacementEvent& event, size_t bytes,
                    std::chrono::steady_clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SealLocked(const std::string& subject, OpenBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SealDueLocked(bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t BufferedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return open_bytes_ + outbox_bytes_;
  }
  // Both release mu_ while they call out (the client library, the handler).
  bool SendOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeRequestResyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  natsConnection* const connection_;
  JetStreamPublisherOptions options_;
  std::unique_ptr<Probe> probe_;
  std::function<void(const ResyncRequest&)> resync_handler_;
  jsCtx* js_ = nullptr;
  // Largest batch: max_batch_bytes within the server's max_payload (Start).
  size_t batch_limit_ = size_t{1} << 20;

  mutable Mutex mu_;
  CondVar wake_;      // sender: work arrived or state changed
  CondVar progress_;  // Flush: acknowledgements arrived
  std::map<std::string, OpenBatch> open_ ABSL_GUARDED_BY(mu_);  // by subject
  size_t open_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Sealed, msg_seq order; front = oldest unacknowledged.
  std::deque<Outgoing> outbox_ ABSL_GUARDED_BY(mu_);
  size_t outbox_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_msg_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  // An ack failed: resend from the oldest unacknowledged.
  bool retry_pending_ ABSL_GUARDED_BY(mu_) = false;
  // After a retry: snapshot every source once drained.
  bool resync_all_ ABSL_GUARDED_BY(mu_) = false;
  // Dropped past buffer_bytes, awaiting a clear; and of those, the ones asked for.
  absl::btree_set<SourceKey> overflowed_ ABSL_GUARDED_BY(mu_);
  absl::btree_set<SourceKey> requested_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_request_ ABSL_GUARDED_BY(mu_){};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_ready_ ABSL_GUARDED_BY(mu_) = true;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sender_;
};

}  // namespace kvindex
