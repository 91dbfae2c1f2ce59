// Parsing of wrk's text report (`wrk --latency`): requests/s and the latency
// percentiles of its "Latency Distribution" block.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

namespace kvindex::bench {

struct WrkReport {
  double requests_per_second = 0;
  double p50_seconds = 0, p75_seconds = 0, p90_seconds = 0, p99_seconds = 0;
  uint64_t requests = 0;
  uint64_t errors = 0;  // socket errors + non-2xx responses
};

// nullopt when the text lacks "Requests/sec:" or the 50%/99% lines.
std::optional<WrkReport> ParseWrkOutput(std::string_view text);

// "1.23ms" -> 0.00123; units us, ms, s, m; nullopt otherwise.
std::optional<double> ParseWrkDuration(std::string_view text);

}  // namespace kvindex::bench
