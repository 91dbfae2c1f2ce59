#include "shared/publish/in_process_sink.h"

namespace kvindex {

InProcessSink::InProcessSink(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

Status InProcessSink::Publish(std::span<const PlacementEvent> events) {
  std::unique_lock lock(mu_);
  for (const PlacementEvent& event : events) {
    not_full_.wait(lock, [&] { return closed_ || queue_.size() < capacity_; });
    if (closed_) return absl::UnavailableError("in-process sink is closed");
    queue_.push_back(event);
    ++published_;
    not_empty_.notify_one();
  }
  return absl::OkStatus();
}

Status InProcessSink::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t target = published_;
  drained_cv_.wait(lock, [&] { return closed_ || drained_ >= target; });
  if (drained_ < target) return absl::UnavailableError("in-process sink closed before flush");
  return absl::OkStatus();
}

size_t InProcessSink::Drain(std::vector<PlacementEvent>* out, size_t max_events,
                            std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  not_empty_.wait_for(lock, wait, [&] { return closed_ || !queue_.empty(); });
  size_t moved = 0;
  while (moved < max_events && !queue_.empty()) {
    out->push_back(std::move(queue_.front()));
    queue_.pop_front();
    ++moved;
  }
  if (moved > 0) {
    drained_ += moved;
    not_full_.notify_all();
    drained_cv_.notify_all();
  }
  return moved;
}

void InProcessSink::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  not_full_.notify_all();
  not_empty_.notify_all();
  drained_cv_.notify_all();
}

uint64_t InProcessSink::published() const {
  std::lock_guard lock(mu_);
  return published_;
}

uint64_t InProcessSink::drained() const {
  std::lock_guard lock(mu_);
  return drained_;
}

size_t InProcessSink::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

}  // namespace kvindex
