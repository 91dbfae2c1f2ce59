// InProcessSink: a bounded, ordered in-memory log between the agent pipeline
// and an embedded router (kvindex-router --embedded) or a test.
//
// Publishers block while the log is full (backpressure instead of loss); the
// single consumer drains events in publish order and assigns log positions.
//
// Thread safety: any number of publishers, one consumer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "shared/publish/publisher.h"

namespace kvindex {

class InProcessSink final : public PlacementPublisher {
 public:
  // capacity: events held before Publish blocks. Default: 1 << 20.
  explicit InProcessSink(size_t capacity = size_t{1} << 20);

  Status Publish(std::span<const PlacementEvent> events) override;
  // Returns once the consumer has drained everything published before the call.
  Status Flush() override;

  // Consumer: moves up to max_events into *out (appending), waiting up to
  // `wait` for the first one. Returns the number moved.
  size_t Drain(std::vector<PlacementEvent>* out, size_t max_events, std::chrono::milliseconds wait);

  // Wakes everyone; later Publish calls fail with Unavailable.
  void Close();

  uint64_t published() const;
  uint64_t drained() const;
  size_t pending() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::condition_variable drained_cv_;
  std::deque<PlacementEvent> queue_;  // guarded by mu_
  uint64_t published_ = 0;            // guarded by mu_
  uint64_t drained_ = 0;              // guarded by mu_
  bool closed_ = false;               // guarded by mu_
};

}  // namespace kvindex
