// StopSignal: the flag a controlling thread raises to end a background
// thread that works in rounds, and the sleep between those rounds, which the
// flag cuts short.
//
//   void Run() {
//     while (!stop_.WaitFor(interval)) DoRound();
//   }
//   void Stop() { stop_.Raise(); thread_.join(); }
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>

#include "shared/base/mutex.h"

namespace kvindex {

class StopSignal {
 public:
  // Lowers the flag again, before a new thread starts.
  void Reset() {
    MutexLock lock(&mu_);
    raised_ = false;
  }

  void Raise() {
    {
      MutexLock lock(&mu_);
      raised_ = true;
    }
    cv_.SignalAll();
  }

  bool raised() const {
    MutexLock lock(&mu_);
    return raised_;
  }

  // Sleeps until `deadline` or until the flag is raised; true when raised.
  template <typename Clock, typename Duration>
  bool WaitUntil(std::chrono::time_point<Clock, Duration> deadline) {
    MutexLock lock(&mu_);
    while (!raised_) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;
    }
    return raised_;
  }

  template <typename Rep, typename Period>
  bool WaitFor(std::chrono::duration<Rep, Period> timeout) {
    return WaitUntil(std::chrono::steady_clock::now() + timeout);
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  bool raised_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvindex
