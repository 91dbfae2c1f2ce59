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
// msg_seq of this incarnation, the next subject_seq of its subject (what
// routers judge gaps by, so a router reading some subjects only sees no
// holes) and the Nats-Msg-Id "<node>:<incarnation>:<msg_seq>", stable
// across retries, so JetStream drops duplicates.
//
// Sending: one sender thread publishes asynchronously, in msg_seq order,
// with at most max_in_flight messages unacknowledged, and only while
// connected. A failed or timed-out message is sent again with the same id,
// followed by everything after it; since a later message may have landed
// before the retry, routers see a gap and clear this agent's sources (fail
// closed), and the publisher asks for snapshots of every source once the
// backlog is acknowledged.
//
// Failures back off: the first negative acknowledgement (or timeout) of a
// round stops sending for retry_backoff_min, doubling per failed round up to
// retry_backoff_max; after it only the oldest message goes out (a probe)
// until one is acknowledged again, so a stream that refuses everything sees
// one message per backoff, not the whole buffer at once. Each failure is
// counted by reason (kvindex_agent_nats_publish_failures_total): "timeout"
// and "unavailable" (JetStream busy or electing) are transient; "no_stream"
// (deleted, or offline), "limits" (storage full, max_msgs / max_bytes with
// discard new) and "refused" (any other refusal) need the stream to change,
// so before the next round the publisher calls check_stream (the agent's
// EnsureStream: a deleted stream is created again).
//
// A "duplicate" acknowledgement for a message never sent before means
// JetStream already held its id from someone else (an attacker publishing
// this agent's next ids in advance): the message is lost. It is handled like
// a buffer overflow: its sources are cleared, their events dropped until a
// snapshot, the snapshot asked for (kvindex_agent_nats_messages_lost_total,
// logged). A duplicate answer to a resend is the normal case (the first send
// landed) and is an acknowledgement.
//
// Buffering while NATS is unreachable: unacknowledged bytes are bounded by
// buffer_bytes. Past it, events are dropped per source: the source is marked
// (one "cleared" for it is still queued, so routers undercount instead of
// keeping blocks whose removal was dropped), its further events are dropped,
// and once the backlog fits again the resync handler is asked for a snapshot
// of it. The mark ends when a "cleared" of the source is published (the
// snapshot's first event).
//
// Lifetime: the client library calls back into the publisher (each
// acknowledgement) on its own thread. Stop and Shutdown return only once no
// callback runs or can start any more (js_PublishAsyncComplete, then the
// pending list taken back), so the publisher may be destroyed right after,
// before or after its connection is closed.
//
// Thread safety: Publish/Flush from any thread; Start/Stop/Shutdown from one
// controlling thread.
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
  // Pause after a failed round of sends, doubling per failed round up to
  // the max; reset by the next acknowledgement. Defaults: 100 ms, 10 s.
  std::chrono::milliseconds retry_backoff_min{100};
  std::chrono::milliseconds retry_backoff_max{10000};
  // Called (from the sender thread, before the next round) after a failure
  // that needs the stream to change (no_stream, limits, refused): checks the
  // stream, creating it when missing. Default: none.
  std::function<Status()> check_stream;
  // The connection to publish on now (nats::Connection::raw, which changes
  // when credentials were refused and a new connection was dialled). The
  // sender moves to a new one by itself: what was in flight on the old one
  // is sent again (same ids), and every source is snapshotted once the
  // backlog is acknowledged (routers may have expired this agent while it
  // was refused). Default: none (the constructor's connection, for good).
  std::function<natsConnection*()> current_connection;
  // Testing: called first in every acknowledgement callback (on the client
  // library's thread). Default: none.
  std::function<void()> ack_observer;

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
  // Stops the sender now; what is not acknowledged yet is dropped (logged).
  // No acknowledgement callback runs after it returns.
  void Stop();
  // Sends what is buffered and waits for its acknowledgements until
  // `deadline`, then stops as Stop does. OK when everything published was
  // acknowledged; DeadlineExceeded (with the count) when some was dropped.
  Status Shutdown(std::chrono::steady_clock::time_point deadline);

  // Queues the events; never blocks on NATS. FailedPrecondition once
  // stopped (for good: the caller drops the events).
  Status Publish(std::span<const PlacementEvent> events) override;
  // Holds messages back (buffered, bounded as ever) until the stream is known
  // to exist; the agent clears it before its background stream setup and
  // sets it once EnsureStream succeeded. Default: ready.
  void SetStreamReady(bool ready);
  // Seals open batches and waits until every message so far is acknowledged
  // by JetStream (stored, as durable as the stream's storage and replicas).
  // FailedPrecondition when the publisher stops first.
  Status Flush() override;

  uint64_t incarnation() const { return options_.incarnation; }
  size_t buffered_bytes() const;
  // Messages acknowledged by JetStream so far.
  uint64_t acked() const;
  // Messages JetStream answered "duplicate" to on their first send (lost).
  uint64_t lost() const;

 private:
  struct Probe;
  struct OpenBatch {
    std::vector<PlacementEvent> events;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point first{};
    // The subject's next subject_seq (docs/events.md, "Numbering").
    uint64_t next_subject_seq = 1;
  };
  struct Outgoing {
    uint64_t msg_seq = 0;
    std::string subject;
    std::string data;
    std::chrono::steady_clock::time_point sealed{};
    std::chrono::steady_clock::time_point sent{};
    uint32_t sends = 0;  // handed to the client library
    bool in_flight = false;
    bool acked = false;
  };
  enum class Failure { kTimeout, kUnavailable, kNoStream, kLimits, kRefused };
  static constexpr size_t kFailures = 5;
  static Failure Classify(natsStatus status, jsErrCode code);
  static bool NeedsStreamCheck(Failure failure) {
    return failure == Failure::kNoStream || failure == Failure::kLimits ||
           failure == Failure::kRefused;
  }

  static void OnAck(jsCtx* js, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error, void* closure);
  struct Ack {
    bool ok = false;
    bool duplicate = false;
    Failure failure = Failure::kTimeout;
    const char* error_text = nullptr;
  };
  void HandleAck(natsMsg* msg, const Ack& ack);
  // False when the acknowledgement matched no message in flight.
  bool RecordAck(uint64_t msg_seq, const Ack& ack);
  // A failed send round: back off, probe with one message, count the reason.
  void FailRoundLocked(Failure failure, uint64_t msg_seq, const char* error_text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The message was lost (a duplicate id it did not send): fail its sources
  // closed and ask for their snapshots, as for a buffer overflow.
  void LoseLocked(const Outgoing& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails `event`'s source closed: marks it, queues its clear.
  void OverflowLocked(const PlacementEvent& event, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins the sender and waits until no acknowledgement callback runs or
  // can start; what stayed unacknowledged is dropped. Returns that count.
  size_t StopAndDrain(std::chrono::steady_clock::time_point deadline);

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
  // These release mu_ while they call out (the client library, the handler,
  // check_stream).
  bool SendOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeRequestResyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeCheckStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Creates js_ on connection_ (sender thread, or Start).
  Status MakeContext();
  // Moves to `next` (options_.current_connection changed); sender thread.
  void RebindLocked(natsConnection* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Written by Start and the sender thread only.
  natsConnection* connection_;
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
  uint64_t lost_ ABSL_GUARDED_BY(mu_) = 0;
  // An ack failed: resend from the oldest unacknowledged, not before retry_at_.
  bool retry_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point retry_at_ ABSL_GUARDED_BY(mu_){};
  std::chrono::milliseconds backoff_ ABSL_GUARDED_BY(mu_){0};
  // Messages that may be in flight: 1 (a probe) after a failure until an
  // acknowledgement, else max_in_flight.
  size_t window_ ABSL_GUARDED_BY(mu_) = 1;
  bool check_stream_pending_ ABSL_GUARDED_BY(mu_) = false;
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
  // A message was handed to js_PublishMsgAsync (written by the sender
  // thread, read by Stop after joining it).
  bool handed_any_ = false;
};

}  // namespace kvindex
