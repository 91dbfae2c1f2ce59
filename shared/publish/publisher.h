// PlacementPublisher: where the agent pipeline hands normalized events.
//
// Implementations: InProcessSink (shared/publish/in_process_sink.h) feeds an
// embedded router in the same process; the JetStream publisher (distribution
// issue) sends batches to NATS. The pipeline calls Publish once per engine
// batch (never per block), so virtual dispatch here is off the hot path.
//
// Thread safety: implementations must accept concurrent Publish calls from
// several source threads.
#pragma once

#include <span>

#include "shared/base/status.h"
#include "shared/model/placement_event.h"

namespace kvindex {

class PlacementPublisher {
 public:
  virtual ~PlacementPublisher() = default;

  // Publishes the events of one engine batch, in order. Events of one source
  // must reach the log in the order of Publish calls for that source.
  // OK: the publisher took the events (queued in order; a publisher with a
  // bounded buffer may drop some and fail their source closed, as it
  // documents). Unavailable: a transient failure, nothing was taken (the
  // caller keeps the events and retries with backoff). FailedPrecondition:
  // the publisher is stopped or closed for good; retrying cannot succeed
  // (the caller drops the events and stops publishing).
  virtual Status Publish(std::span<const PlacementEvent> events) = 0;

  // Blocks until everything published before the call is in the log, where
  // its consumers read it: JetStream acknowledged it (stored, as durable as
  // the stream's storage and replicas); the in-process sink's consumer, the
  // embedded router, took it (memory only: durable with the router's next
  // checkpoint); the JSONL writer wrote it to its stream. FailedPrecondition
  // when the publisher stopped or closed first; Unavailable on a transient
  // failure.
  virtual Status Flush() = 0;
};

}  // namespace kvindex
