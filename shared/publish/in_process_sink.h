// InProcessSink: a bounded, ordered in-memory log between the agent pipeline
// and an embedded router (kvindex-router --embedded) or a test.
//
// Publishers block while the log is full (backpressure instead of loss); the
// single consumer drains events in publish order and assigns log positions.
//
// Thread safety: any number of publishers, one consumer.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "shared/base/mutex.h"
#include "shared/publish/publisher.h"

namespace kvindex {

class InProcessSink final : public PlacementPublisher {
 public:
  // capacity: events held before Publish blocks. Default: 1 << 20.
  explicit InProcessSink(size_t capacity = size_t{1} << 20);

  // FailedPrecondition once closed.
  Status Publish(std::span<const PlacementEvent> events) override;
  // Returns once the consumer has drained everything published before the
  // call (taken, not durable: the in-process log is memory).
  // FailedPrecondition when closed first.
  Status Flush() override;

  // Consumer: moves up to max_events into *out (appending), waiting up to
  // `wait` for the first one. Returns the number moved.
  size_t Drain(std::vector<PlacementEvent>* out, size_t max_events, std::chrono::milliseconds wait);

  // Wakes everyone; later Publish and Flush calls fail with FailedPrecondition.
  void Close();

  uint64_t published() const;
  uint64_t drained() const;
  size_t pending() const;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  CondVar not_full_;
  CondVar not_empty_;
  CondVar drained_cv_;
  std::deque<PlacementEvent> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t published_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t drained_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvindex
