// JetStreamLogReader: the LogReader over a JetStream stream, for replicated
// routers. Each router reads the whole stream in order through its own
// ordered push consumer (ephemeral, flow controlled, no acks), starting at a
// given stream sequence; the stream sequence of a message is its log
// position, so every replica applies the same messages at the same
// positions (semantics.md section 6).
//
//   JetStreamLogReader reader(connection->jetstream(), {.stream = "KVINDEX",
//                             .subjects = "kvindex.events.>"}, &probe);
//   ApplyLoop loop(&reader, &index, &probe, {});
//
// Bounded memory: the NATS client buffers at most pending_msgs /
// pending_bytes for this subscription. When apply falls further behind, the
// client drops messages instead of blocking its threads; the ordered
// consumer notices the hole in its delivery sequence and restarts after the
// last delivered message, so nothing is skipped. If delivery stalls while
// the stream holds newer messages (a server restart lost the ephemeral
// consumer), the reader resubscribes after the last message it returned.
//
// A read that fails after it already took messages from the subscription
// hands those over (OK) and returns the failure from the next Read: the
// position moved past them, so dropping them would lose them for good.
//
// Thread safety: as LogReader (one reading thread).
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "shared/consume/log_reader.h"

namespace kvindex::consume {

struct JetStreamLogOptions {
  // Stream to read. Default: "KVINDEX".
  std::string stream = "KVINDEX";
  // Consumer filter subject (nats-server 2.9: one per consumer).
  // Default: "kvindex.events.>".
  std::string subjects = "kvindex.events.>";
  // Most messages / bytes the client buffers for the subscription.
  // Defaults: 65536 and 256 MiB.
  int pending_msgs = 65536;
  int pending_bytes = 256 << 20;
  // Idle time after which the reader checks the stream for messages it was
  // not given, and resubscribes when there are. Default: 2 s.
  std::chrono::milliseconds stall_check{2000};
  // Called by Open before anything else (e.g. create the stream when it is
  // missing, so start order never matters). Default: none.
  std::function<Status()> prepare;
  // The JetStream context to read through now (nats::Connection::jetstream,
  // which changes when credentials were refused and a new connection was
  // dialled). Read moves to a new one by itself, resubscribing after the
  // last message it returned. Default: none (the constructor's, for good).
  std::function<jsCtx*()> current_js;
  // With a filter narrower than the stream (FilteredLogReader): where the
  // stream stores the next message of `subjects` at or after a position, 0
  // for none (NextBySubject). The stall check then asks it instead of
  // comparing with the stream's last position, which may be another
  // subject's. Default: none (the filter is the whole stream).
  std::function<StatusOr<uint64_t>(uint64_t seq, const std::string& subject)> next_by_subject;
  // Testing (fault injection): called instead of natsSubscription_NextMsg.
  // Default: none (the client library's).
  std::function<natsStatus(natsMsg**, natsSubscription*, int64_t)> next_msg;
};

class JetStreamLogReader final : public LogReader {
 public:
  // `js` must outlive the reader.
  JetStreamLogReader(jsCtx* js, JetStreamLogOptions options);
  ~JetStreamLogReader() override;
  JetStreamLogReader(const JetStreamLogReader&) = delete;
  JetStreamLogReader& operator=(const JetStreamLogReader&) = delete;

  Status Open(uint64_t first_position) override;
  Status Read(LogBatch* batch, size_t max_events, std::chrono::milliseconds wait) override;
  uint64_t LastKnownPosition() const override {
    return last_known_.load(std::memory_order_acquire);
  }
  uint64_t OpenTarget() const override { return open_target_.load(std::memory_order_acquire); }

  // Subscriptions made (1 after the first Open; more after stalls).
  uint64_t subscriptions() const { return subscriptions_.load(std::memory_order_relaxed); }

 private:
  Status Subscribe(uint64_t first_position);
  void Unsubscribe();
  void Abandon();  // the stalled subscription, without unsubscribing it
  // Appends one message; false when it is not a new position.
  bool Append(natsMsg* msg, LogBatch* batch);
  Status CheckStall();
  // Takes options_.current_js when it changed (abandoning the subscription).
  void FollowConnection();

  jsCtx* js_;  // the reading thread's (see current_js)
  const JetStreamLogOptions options_;
  natsSubscription* sub_ = nullptr;
  uint64_t last_returned_ = 0;  // position of the last message handed out
  Status deferred_error_;       // a failure after messages were taken: next Read
  std::chrono::steady_clock::time_point last_progress_{};
  std::atomic<uint64_t> last_known_{0};
  std::atomic<uint64_t> open_target_{0};
  std::atomic<uint64_t> subscriptions_{0};
};

}  // namespace kvindex::consume
