// Percentile: the nearest-rank percentile of a sample (the value at rank
// floor(q * n), clamped to the last), for the figures the simulators and
// benchmarks report. Takes a copy and partially sorts it: O(n).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvindex {

// q in [0, 1]; 0 for an empty sample.
inline double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  const size_t k =
      std::min(values.size() - 1, static_cast<size_t>(q * static_cast<double>(values.size())));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

}  // namespace kvindex
