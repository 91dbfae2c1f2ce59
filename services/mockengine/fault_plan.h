// FaultPlan: when the simulated engines misbehave, reproducibly.
//
// Each knob is either an exact count ("3": that many faults, at seeded
// request positions over the run) or a rate ("0.5%" or "0.005": each
// published batch independently, from a seeded stream per kind). A fault
// due at a request that publishes nothing waits for the next batch, so an
// exact count is met unless the run ends first. Same seed, same trace, same
// faults.
//
//   FaultPlan plan(specs, seed, requests.size());
//   plan.OnRequest(r);
//   if (plan.Fire(FaultKind::kDrop)) ...   // once per batch and kind
//
// Thread safety: none.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::mockengine {

enum class FaultKind : uint8_t { kDrop, kGap, kRestart, kMalformed, kSlow };
inline constexpr int kNumFaultKinds = 5;
// "drop", "gap", "restart", "malformed", "slow" (flag suffix and report key).
std::string_view FaultKindName(FaultKind kind);

struct FaultSpec {
  bool exact = true;  // true: `count` faults; false: each batch with `rate`
  uint64_t count = 0;
  double rate = 0;
  bool enabled() const { return exact ? count > 0 : rate > 0; }
};

// "" or "0" = off, "N" = exactly N, "0.5%" or "0.005" = a rate in [0, 1].
StatusOr<FaultSpec> ParseFaultSpec(std::string_view text);

class FaultPlan {
 public:
  FaultPlan() = default;
  FaultPlan(const std::array<FaultSpec, kNumFaultKinds>& specs, uint64_t seed, size_t requests);

  // Request r is about to be served: faults placed at it become due.
  void OnRequest(size_t r);
  // A batch is about to be published: true = inject `kind` into it.
  bool Fire(FaultKind kind);
  bool any() const { return any_; }
  uint64_t injected(FaultKind kind) const { return injected_[static_cast<int>(kind)]; }

 private:
  std::array<FaultSpec, kNumFaultKinds> specs_{};
  std::array<std::mt19937_64, kNumFaultKinds> rng_;
  std::array<std::vector<uint8_t>, kNumFaultKinds> at_request_;  // exact: 1 = placed here
  std::array<uint64_t, kNumFaultKinds> pending_{};
  std::array<uint64_t, kNumFaultKinds> injected_{};
  bool any_ = false;
};

}  // namespace kvindex::mockengine
