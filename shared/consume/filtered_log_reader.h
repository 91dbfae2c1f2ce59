// FilteredLogReader: the LogReader of a router that reads only some models'
// messages of a stream (`kvindex-router --read-models`, docs/scaling.md "How
// kvindex shards past one stream", item 3). nats-server 2.9 gives a consumer
// one filter subject, and a model's subject, the agents' control subject and
// the expiry subject differ in one token, so it runs one JetStreamLogReader
// per filter subject (each model's, `<prefix>._agent.*`, `<prefix>._expire.*`)
// and merges them in stream-sequence order: the ApplyLoop sees one log, as
// from an unfiltered reader with the other models' messages left out.
//
// The merge hands out position s only once every other consumer is known to
// hold nothing below s: a consumer with a buffered message at t > s proves it;
// an idle one is asked where its next message is stored (NextBySubject: an
// answer t > s, or none, proves it; t < s means its message is in flight and
// the merge waits for it). Positions nobody here is given are passed over
// with an empty message (no events, no subject) at the horizon every
// consumer is proven complete through, checked every `horizon_check` while
// idle and behind the stream's end: the router's applied_seq reaches the
// stream's last position (readiness, OpenTarget) like an unfiltered router's,
// and a checkpoint taken there resumes exactly (Open at applied_seq + 1 opens
// every consumer there).
//
// Sender numbering per (agent, subject) keeps the other models' messages
// from looking like lost ones (AgentTable, docs/events.md "Numbering").
//
//   FilteredLogReader reader({.log = log_options,
//                             .subjects = FilterSubjects(scheme, {"model-a"}),
//                             .next_by_subject = ...});
//   ApplyLoop loop(&reader, &index, &probe, {.models = {"model-a"}});
//
// Thread safety: as LogReader (one reading thread; LastKnownPosition and
// OpenTarget from any).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/consume/jetstream_log_reader.h"
#include "shared/consume/log_reader.h"
#include "shared/nats/subjects.h"

namespace kvindex::consume {

// The filters of a router reading `models` only: each model's subject, the
// agents' control subject and the expiry subject (`<prefix>.<token>.*`,
// `<prefix>._agent.*`, `<prefix>._expire.*`).
std::vector<std::string> FilterSubjects(const nats::SubjectScheme& scheme,
                                        const std::vector<std::string>& models);

struct FilteredLogOptions {
  // Stream, limits, prepare and connection of every consumer; `subjects` is
  // replaced by each entry of `subjects` below.
  JetStreamLogOptions log;
  // One consumer each; disjoint filters covering what the router reads.
  std::vector<std::string> subjects;
  // Where the stream stores the next message of a filter at or after a
  // position, 0 for none (NextBySubject). Required.
  std::function<StatusOr<uint64_t>(uint64_t seq, const std::string& subject)> next_by_subject;
  // Read the stream's state to find the horizon: for an idle router, at
  // most this often. Default: 250 ms.
  std::chrono::milliseconds horizon_check{250};
  // The stream's last position (nats::GetStreamState). Required.
  std::function<StatusOr<uint64_t>()> stream_last;
};

class FilteredLogReader final : public LogReader {
 public:
  explicit FilteredLogReader(jsCtx* js, FilteredLogOptions options);
  FilteredLogReader(const FilteredLogReader&) = delete;
  FilteredLogReader& operator=(const FilteredLogReader&) = delete;

  Status Open(uint64_t first_position) override;
  Status Read(LogBatch* batch, size_t max_events, std::chrono::milliseconds wait) override;
  uint64_t LastKnownPosition() const override;
  uint64_t OpenTarget() const override { return open_target_.load(std::memory_order_acquire); }

  // Questions asked (NextBySubject) and positions passed over, for tests.
  uint64_t questions() const { return questions_; }
  uint64_t horizons() const { return horizons_; }

 private:
  struct Consumer {
    std::string subject;
    std::unique_ptr<JetStreamLogReader> reader;
    LogBatch buffer;  // read, not handed out yet
    size_t next = 0;  // buffer.messages[next] is the head
    // Every message of this consumer at a position <= proven was read.
    uint64_t proven = 0;
    // Where the stream stores its next message, when asked and not read yet
    // (0: not known): no need to ask again while it is in flight.
    uint64_t next_known = 0;
    bool Empty() const { return next >= buffer.messages.size(); }
    uint64_t Head() const { return buffer.messages[next].position; }
  };
  // Proves `c` complete through `position` when it can (one question).
  Status Prove(Consumer& c, uint64_t position, uint64_t received);
  // Hands out position `horizon` as an empty message when every consumer is
  // proven through it.
  Status MaybeHorizon(LogBatch* batch);

  const FilteredLogOptions options_;
  std::vector<Consumer> consumers_;
  uint64_t last_returned_ = 0;
  uint64_t received_ = 0;  // highest position any consumer read
  std::chrono::steady_clock::time_point last_horizon_check_{};
  std::atomic<uint64_t> open_target_{0};
  std::atomic<uint64_t> stream_last_{0};
  uint64_t questions_ = 0;
  uint64_t horizons_ = 0;
};

}  // namespace kvindex::consume
