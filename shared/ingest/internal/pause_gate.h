// PauseGate: parks the agent's source threads between two engine batches
// (AgentPipeline::PauseSources), so everything they published is in the
// publisher and nothing more comes until the pause ends.
//
// Thread safety: Park from the source threads; Pause/End from the controlling
// thread (End also from Stop). The hot loops read one atomic flag per batch.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>

#include "shared/base/mutex.h"

namespace kvindex::ingest::internal {

class PauseGate {
 public:
  // Source threads: returns at once unless a pause is wanted; else waits
  // until it ends or `stop` is set (and End or a later pause wakes it).
  void Park(const std::atomic<bool>& stop);
  // True once `threads` source threads are parked (they stay parked until
  // End); false after `timeout`, or when `running` is false: the pause is
  // ended then, nothing stays parked.
  bool Pause(std::chrono::milliseconds timeout, size_t threads, const std::atomic<bool>& running);
  // Ends a pause (wakes every parked thread); harmless without one.
  void End();

 private:
  void EndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  CondVar cv_;
  bool wanted_ ABSL_GUARDED_BY(mu_) = false;
  size_t parked_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> flag_{false};  // what the hot loops read
};

}  // namespace kvindex::ingest::internal
