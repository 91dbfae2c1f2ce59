// WorkerPool: a fixed number of threads running posted tasks in order of
// posting; for work that may block (an HTTP call) and must not run on
// gRPC's callback threads. The destructor runs the tasks already posted,
// then joins.
//
//   WorkerPool pool(4);
//   pool.Post([] { ... });
//
// Thread safety: Post may be called from any thread.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "shared/base/mutex.h"

namespace kvindex::epp {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Post(std::function<void()> task);

 private:
  void Run();

  Mutex mu_;
  CondVar ready_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvindex::epp
