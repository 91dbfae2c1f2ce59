// GracePeriod: when may the writer free something readers could still hold?
//
// Readers bracket every use of published memory (the locator, nodes, source
// records) with Enter/Exit; after unpublishing an object the writer calls
// Synchronize, which returns once no reader section that could have seen it
// is still running. Readers never wait.
//
// A reader section costs two plain stores to a slot of its own thread: no
// shared counter, no locked instruction. (A locked instruction waits for the
// thread's store buffer to drain; right after a burst of writes that cost
// ~0.4 us at p99 per lookup.) The ordering a reader would need a fence for is
// supplied by the writer instead: Synchronize issues membarrier(2)
// (PRIVATE_EXPEDITED), which runs a full barrier on every CPU that runs a
// thread of this process, then waits for the slots of older sections to clear.
// Where membarrier is unavailable, and under ThreadSanitizer (which does not
// model it), readers issue the fence themselves.
//
// Thread safety: Enter/Exit from any thread (sections do not nest per
// thread); Synchronize from the single writer of the owning index. Slots are
// process-wide and shared by every GracePeriod: a writer may also wait for a
// short section of another index, never for long.
#pragma once

#include <cstdint>

namespace kvindex::index::internal {

class GracePeriod {
 public:
  void Enter() const;
  void Exit() const;
  void Synchronize();
};

}  // namespace kvindex::index::internal
