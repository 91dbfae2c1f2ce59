// Token ids for the simulator's unit tests: n consecutive ids from `start`.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

namespace kvindex::mockengine::testing {

inline std::vector<uint32_t> Tokens(size_t n, uint32_t start = 1) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

}  // namespace kvindex::mockengine::testing
