// Test-only: what the consume tests read back from one router replica: the
// workers an index answers for one block, and a refusal counter.
//
//   EXPECT_EQ(testing::Holders(index, "m", 7), std::vector<std::string>{"w0"});
//   EXPECT_EQ(testing::RefusedMessages(probe, "too_many_nodes"), 1);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/consume/router_probe.h"
#include "shared/index/index_interface.h"

namespace kvindex::consume::testing {

// Workers holding block `hash` of `model`, in match order.
inline std::vector<std::string> Holders(const index::IndexInterface& index, std::string_view model,
                                        uint64_t hash) {
  std::vector<std::string> out;
  auto match = index.MatchSequenceHashes(model, std::vector<uint64_t>{hash});
  if (!match.ok()) return out;
  for (const auto& worker : match->workers) out.push_back(worker.source.worker);
  return out;
}

// kvindex_router_log_messages_refused_total{reason}; -1 when absent.
inline double RefusedMessages(const RouterProbe& probe, std::string_view reason) {
  for (const auto& family : probe.Collect()) {
    if (family.name != "kvindex_router_log_messages_refused_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "reason" && label.value == reason) return metric.counter.value;
      }
    }
  }
  return -1;
}

}  // namespace kvindex::consume::testing
