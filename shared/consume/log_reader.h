// LogReader: the consumer side of the ordered placement log. Two
// implementations sit behind it: InProcessLogReader (the InProcessSink of
// `kvindex-router --embedded`) and JetStreamLogReader (a JetStream stream,
// for replicated routers). The ApplyLoop is the same for both.
//
//   JetStreamLogReader reader(connection, stream_options, &probe);
//   KVINDEX_RETURN_IF_ERROR(reader.Open(/*first_position=*/applied_seq + 1));
//   LogBatch batch;
//   KVINDEX_RETURN_IF_ERROR(reader.Read(&batch, 4096, std::chrono::milliseconds(50)));
//   for (size_t m = 0; m < batch.messages.size(); ++m) Apply(batch.Events(m), ...);
//
// A message is the unit of the log: all its events share one log position
// (the JetStream stream sequence), and positions strictly increase.
//
// Thread safety: one consumer thread calls Open/Read; LastKnownPosition and
// OpenTarget may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shared/base/status.h"
#include "shared/codec/placement_codec.h"
#include "shared/model/placement_event.h"

namespace kvindex::consume {

struct LogBatch {
  struct Message {
    uint64_t position = 0;  // log position, strictly increasing
    size_t end = 0;         // its events are events[previous end, end)
    codec::MessageHeader header;
    // The payload did not decode: no events. header.agent is the sending
    // node when the subject names it (the apply loop fails closed for it).
    bool invalid = false;
    // The NATS subject the message was published on: the node it names is
    // the only node the message may speak for (consume/log_subject.h,
    // docs/security.md). Empty for the in-process log, whose only writer is
    // the router's own embedded agent: trusted, no subject check.
    std::string subject;
    // When the log stored the message (JetStream's timestamp), ns since the
    // epoch; the same on every replica, unlike a replica's clock. 0: unknown
    // (in-process log).
    uint64_t stored_ns = 0;
    // Read through a subject filter (FilteredLogReader): the positions
    // between the previous message and this one are other subjects', not
    // lost (no position_gap).
    bool filtered = false;
  };
  std::vector<PlacementEvent> events;
  std::vector<Message> messages;

  void Clear() {
    events.clear();
    messages.clear();
  }
  std::span<const PlacementEvent> Events(size_t m) const {
    const size_t begin = m == 0 ? 0 : messages[m - 1].end;
    return std::span<const PlacementEvent>(events.data() + begin, messages[m].end - begin);
  }
};

class LogReader {
 public:
  virtual ~LogReader() = default;

  // Starts (or restarts) reading at log position `first_position` (>= 1).
  // Unavailable when the log cannot be reached (the caller retries).
  virtual Status Open(uint64_t first_position) = 0;

  // Appends whole messages to *batch, about `max_events` events at most but
  // at least one message when one is available, waiting up to `wait` for the
  // first. OK with nothing appended when nothing arrived in time. An error
  // appends nothing: messages a read took before it failed are handed over
  // with OK, and the failure is returned by the next call.
  virtual Status Read(LogBatch* batch, size_t max_events, std::chrono::milliseconds wait) = 0;

  // Highest position known to exist in the log (lag), 0 when unknown.
  virtual uint64_t LastKnownPosition() const = 0;
  // The log's last position when Open was called: a router is caught up
  // (ready) once it applied this position.
  virtual uint64_t OpenTarget() const = 0;
};

}  // namespace kvindex::consume
