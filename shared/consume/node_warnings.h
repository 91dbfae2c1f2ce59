// NodeWarnings: at most one WARN per node per interval (quota refusals,
// docs/security.md), so one flooding node neither fills the log nor hides
// another node's refusals. Bounded: past kMaxNodes nodes, entries whose
// interval ended are forgotten; if still full, the nodes beyond share one
// limiter.
//
//   NodeWarnings warnings(std::chrono::seconds(10));
//   uint64_t suppressed = 0;
//   if (warnings.Allow(node, now, &suppressed)) log(..., suppressed);
//
// Thread safety: one thread (the apply thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "shared/log/log.h"

namespace kvindex::consume {

class NodeWarnings {
 public:
  static constexpr size_t kMaxNodes = 4096;

  explicit NodeWarnings(std::chrono::steady_clock::duration interval)
      : interval_(interval), shared_(interval) {}

  // True when `node` may be warned about at `now`; *suppressed gets the calls
  // held back for it since its last warning.
  bool Allow(const std::string& node, std::chrono::steady_clock::time_point now,
             uint64_t* suppressed) {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) {
      if (nodes_.size() >= kMaxNodes) {
        absl::erase_if(nodes_, [&](const auto& entry) { return entry.second.next <= now; });
      }
      if (nodes_.size() >= kMaxNodes) return shared_.Allow(suppressed, now);
      it = nodes_.emplace(node, Entry{}).first;
    }
    Entry& entry = it->second;
    if (now < entry.next) {
      ++entry.suppressed;
      return false;
    }
    *suppressed = entry.suppressed;
    entry.suppressed = 0;
    entry.next = now + interval_;
    return true;
  }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point next{};
    uint64_t suppressed = 0;
  };
  const std::chrono::steady_clock::duration interval_;
  absl::flat_hash_map<std::string, Entry> nodes_;
  log::RateLimiter shared_;
};

}  // namespace kvindex::consume
