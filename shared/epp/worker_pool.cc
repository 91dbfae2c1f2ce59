#include "shared/epp/worker_pool.h"

#include <utility>

namespace kvindex::epp {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  ready_.SignalAll();
  for (std::thread& thread : threads_) thread.join();
}

void WorkerPool::Post(std::function<void()> task) {
  {
    MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }
  ready_.Signal();
}

void WorkerPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (tasks_.empty() && !stopping_) ready_.Wait(&mu_);
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kvindex::epp
