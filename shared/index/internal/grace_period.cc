#include "shared/index/internal/grace_period.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <thread>

#include "shared/base/mutex.h"

namespace kvindex::index::internal {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

// One per reader thread; epoch 0 = not in a section, else the epoch the
// section began in.
struct alignas(64) ReaderSlot {
  std::atomic<uint64_t> epoch{0};
  std::atomic<bool> taken{false};
};

// Process-wide and never destroyed (threads may outlive static destructors).
struct Registry {
  Mutex mu;
  std::deque<ReaderSlot> slots ABSL_GUARDED_BY(mu);  // stable addresses
};

Registry& Readers() {
  static Registry* registry = new Registry;
  return *registry;
}

std::atomic<uint64_t> g_epoch{1};

bool AsymmetricFences() {
  static const bool ok =
      !kThreadSanitizer &&
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return ok;
}

class SlotHandle {
 public:
  SlotHandle() {
    Registry& r = Readers();
    MutexLock lock(&r.mu);
    for (ReaderSlot& s : r.slots) {
      if (!s.taken.load(std::memory_order_relaxed)) {
        s.taken.store(true, std::memory_order_relaxed);
        slot_ = &s;
        return;
      }
    }
    slot_ = &r.slots.emplace_back();
    slot_->taken.store(true, std::memory_order_relaxed);
  }
  ~SlotHandle() {
    MutexLock lock(&Readers().mu);
    slot_->epoch.store(0, std::memory_order_release);
    slot_->taken.store(false, std::memory_order_relaxed);
  }
  ReaderSlot* slot() const { return slot_; }

 private:
  ReaderSlot* slot_;
};

ReaderSlot* ThisThread() {
  thread_local SlotHandle handle;
  return handle.slot();
}

}  // namespace

void GracePeriod::Enter() const {
  // Registered before the first section, so a writer's membarrier always
  // covers this thread.
  static const bool asymmetric = AsymmetricFences();
  ReaderSlot* slot = ThisThread();
  const uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
  if (asymmetric) {
    slot->epoch.store(epoch, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // compiler only
  } else {
    slot->epoch.exchange(epoch, std::memory_order_seq_cst);
  }
}

void GracePeriod::Exit() const { ThisThread()->epoch.store(0, std::memory_order_release); }

void GracePeriod::Synchronize() {
  const uint64_t now = g_epoch.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (AsymmetricFences()) {
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // Under the registry lock: the slot list does not change while it is walked
  // (a new reader thread's first section waits for the walk).
  Registry& r = Readers();
  MutexLock lock(&r.mu);
  for (const ReaderSlot& slot : r.slots) {
    for (;;) {
      const uint64_t e = slot.epoch.load(std::memory_order_acquire);
      if (e == 0 || e >= now) break;
      std::this_thread::yield();
    }
  }
}

}  // namespace kvindex::index::internal
