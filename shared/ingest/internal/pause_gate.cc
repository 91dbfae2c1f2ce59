#include "shared/ingest/internal/pause_gate.h"

namespace kvindex::ingest::internal {

void PauseGate::Park(const std::atomic<bool>& stop) {
  if (!flag_.load(std::memory_order_acquire)) return;
  MutexLock lock(&mu_);
  ++parked_;
  cv_.SignalAll();
  while (wanted_ && !stop.load()) cv_.Wait(&mu_);
  --parked_;
}

bool PauseGate::Pause(std::chrono::milliseconds timeout, size_t threads,
                      const std::atomic<bool>& running) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  wanted_ = true;
  flag_.store(true, std::memory_order_release);
  while (running && parked_ < threads) {
    if (!cv_.WaitUntil(&mu_, deadline)) break;
  }
  if (running && parked_ == threads) return true;
  EndLocked();
  return false;
}

void PauseGate::End() {
  MutexLock lock(&mu_);
  EndLocked();
}

void PauseGate::EndLocked() {
  wanted_ = false;
  flag_.store(false, std::memory_order_release);
  cv_.SignalAll();
}

}  // namespace kvindex::ingest::internal
