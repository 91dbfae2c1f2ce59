// Mutex: std::mutex with Clang thread-safety annotations; the one mutex
// wrapper of the project (guard fields with ABSL_GUARDED_BY(mu_)).
//
// Why not absl::Mutex: Debian's libabsl is not built with ThreadSanitizer
// instrumentation, so TSan cannot see its synchronization and reports false
// races; std::mutex (pthread) is intercepted by TSan. The annotations keep
// -Wthread-safety checking ABSL_GUARDED_BY fields.
//
// Thread safety: it is a mutex.
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace kvindex {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace kvindex
