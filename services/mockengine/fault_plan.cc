#include "services/mockengine/fault_plan.h"

#include <algorithm>
#include <charconv>
#include <numeric>

namespace kvindex::mockengine {

std::string_view FaultKindName(FaultKind kind) {
  static constexpr std::string_view kNames[kNumFaultKinds] = {"drop", "gap", "restart", "malformed",
                                                              "slow"};
  return kNames[static_cast<int>(kind)];
}

StatusOr<FaultSpec> ParseFaultSpec(std::string_view text) {
  FaultSpec spec;
  if (text.empty()) return spec;
  const bool percent = text.back() == '%';
  if (percent) text.remove_suffix(1);
  const bool fraction = percent || text.find_first_of(".eE") != std::string_view::npos;
  const char* end = text.data() + text.size();
  if (!fraction) {
    auto [ptr, ec] = std::from_chars(text.data(), end, spec.count);
    if (ec == std::errc() && ptr == end) return spec;
  } else {
    double value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (percent) value /= 100;
    if (ec == std::errc() && ptr == end && value >= 0 && value <= 1) {
      spec.exact = false;
      spec.rate = value;
      return spec;
    }
  }
  return absl::InvalidArgumentError("'" + std::string(text) +
                                    "': expected a count (3) or a rate (0.5% or 0.005)");
}

FaultPlan::FaultPlan(const std::array<FaultSpec, kNumFaultKinds>& specs, uint64_t seed,
                     size_t requests)
    : specs_(specs) {
  for (int k = 0; k < kNumFaultKinds; ++k) {
    // One stream per kind: turning one knob on does not move the others.
    rng_[k].seed(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(k) + 1);
    const FaultSpec& spec = specs_[k];
    any_ = any_ || spec.enabled();
    if (!spec.exact || spec.count == 0 || requests == 0) continue;
    std::vector<size_t> order(requests);
    std::iota(order.begin(), order.end(), size_t{0});
    const size_t n = std::min<size_t>(spec.count, requests);
    for (size_t i = 0; i < n; ++i) {  // partial Fisher-Yates: n distinct positions
      std::uniform_int_distribution<size_t> pick(i, requests - 1);
      std::swap(order[i], order[pick(rng_[k])]);
    }
    at_request_[k].assign(requests, 0);
    for (size_t i = 0; i < n; ++i) at_request_[k][order[i]] = 1;
    pending_[k] = spec.count - n;  // more faults than requests: due at once
  }
}

void FaultPlan::OnRequest(size_t r) {
  for (int k = 0; k < kNumFaultKinds; ++k) {
    if (r < at_request_[k].size() && at_request_[k][r]) ++pending_[k];
  }
}

bool FaultPlan::Fire(FaultKind kind) {
  const int k = static_cast<int>(kind);
  const FaultSpec& spec = specs_[k];
  if (!spec.enabled()) return false;
  bool fire = false;
  if (spec.exact) {
    fire = pending_[k] > 0;
    if (fire) --pending_[k];
  } else {
    fire = static_cast<double>(rng_[k]() >> 11) * 0x1.0p-53 < spec.rate;
  }
  if (fire) ++injected_[k];
  return fire;
}

}  // namespace kvindex::mockengine
