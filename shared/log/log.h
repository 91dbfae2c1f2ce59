// Logging for every kvindex binary: one named spdlog logger per subsystem,
// text or JSON lines on stderr.
//
//   KVINDEX_RETURN_IF_ERROR(log::Init("json", "info"));
//   auto logger = log::Get("ingest");
//   logger->warn("replay from {} failed: {}", seq, status.ToString());
//
// Nothing is logged per event at info or above; repeated warnings go through
// RateLimiter so a flood of bad input costs one line per interval.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "shared/base/status.h"

namespace kvindex::log {

// format: "text" or "json"; level: spdlog level name. Safe to call again
// (reconfigures every existing logger). InvalidArgument on unknown values.
Status Init(std::string_view format, std::string_view level);

// The logger of a subsystem ("agent", "ingest", "router", ...), created on
// first use with the configured format and level. Thread safe.
std::shared_ptr<spdlog::logger> Get(const std::string& subsystem);

// Lets one message through per interval and counts the ones it held back.
//
//   static log::RateLimiter limiter(std::chrono::seconds(10));
//   if (uint64_t suppressed; limiter.Allow(&suppressed))
//     logger->warn("bad frame from {} ({} more suppressed)", source, suppressed);
//
// Thread safety: Allow may be called from any thread.
class RateLimiter {
 public:
  explicit RateLimiter(std::chrono::steady_clock::duration interval) : interval_(interval) {}
  // True when a message may be logged now; *suppressed gets the number of
  // calls held back since the last allowed one.
  bool Allow(uint64_t* suppressed) { return Allow(suppressed, std::chrono::steady_clock::now()); }
  // The same at a given time (tests drive the clock).
  bool Allow(uint64_t* suppressed, std::chrono::steady_clock::time_point now);

 private:
  const std::chrono::steady_clock::duration interval_;
  std::atomic<int64_t> next_allowed_ns_{0};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace kvindex::log
