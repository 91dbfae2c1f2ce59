#include "shared/publish/in_process_sink.h"

namespace kvindex {

InProcessSink::InProcessSink(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

Status InProcessSink::Publish(std::span<const PlacementEvent> events) {
  MutexLock lock(&mu_);
  for (const PlacementEvent& event : events) {
    while (!closed_ && queue_.size() >= capacity_) not_full_.Wait(&mu_);
    if (closed_) return absl::FailedPreconditionError("in-process sink is closed");
    queue_.push_back(event);
    ++published_;
    not_empty_.Signal();
  }
  return absl::OkStatus();
}

Status InProcessSink::Flush() {
  MutexLock lock(&mu_);
  const uint64_t target = published_;
  while (!closed_ && drained_ < target) drained_cv_.Wait(&mu_);
  if (drained_ < target)
    return absl::FailedPreconditionError("in-process sink closed before flush");
  return absl::OkStatus();
}

size_t InProcessSink::Drain(std::vector<PlacementEvent>* out, size_t max_events,
                            std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  MutexLock lock(&mu_);
  while (!closed_ && queue_.empty()) {
    if (!not_empty_.WaitUntil(&mu_, deadline)) break;
  }
  size_t moved = 0;
  while (moved < max_events && !queue_.empty()) {
    out->push_back(std::move(queue_.front()));
    queue_.pop_front();
    ++moved;
  }
  if (moved > 0) {
    drained_ += moved;
    not_full_.SignalAll();
    drained_cv_.SignalAll();
  }
  return moved;
}

void InProcessSink::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  not_full_.SignalAll();
  not_empty_.SignalAll();
  drained_cv_.SignalAll();
}

uint64_t InProcessSink::published() const {
  MutexLock lock(&mu_);
  return published_;
}

uint64_t InProcessSink::drained() const {
  MutexLock lock(&mu_);
  return drained_;
}

size_t InProcessSink::pending() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace kvindex
