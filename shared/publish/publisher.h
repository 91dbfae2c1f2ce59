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
  // Unavailable: the transport is down (the caller keeps the events and retries).
  virtual Status Publish(std::span<const PlacementEvent> events) = 0;

  // Blocks until everything published so far is durable in the log.
  virtual Status Flush() = 0;
};

}  // namespace kvindex
