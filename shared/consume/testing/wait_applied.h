// Test-only: waits (at most `limit`) until an apply loop has caught up with
// its log and has nothing pending; returns whether it has.
//
//   ASSERT_TRUE(sink.Publish(events).ok());
//   ASSERT_TRUE(consume::testing::WaitUntilApplied(loop));
#pragma once

#include <chrono>
#include <thread>

#include "shared/consume/apply_loop.h"

namespace kvindex::consume::testing {

inline bool WaitUntilApplied(const ApplyLoop& loop,
                             std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while ((!loop.CaughtUp() || loop.Pending() != 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return loop.CaughtUp();
}

}  // namespace kvindex::consume::testing
