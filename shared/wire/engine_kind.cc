#include "shared/wire/engine_kind.h"

namespace kvindex::wire {
namespace {

constexpr std::string_view kNames[kNumEngineKinds] = {"vllm", "sglang", "trtllm"};

}  // namespace

std::optional<EngineKind> EngineKindFromName(std::string_view name) {
  for (int i = 0; i < kNumEngineKinds; ++i) {
    if (kNames[i] == name) return static_cast<EngineKind>(i);
  }
  return std::nullopt;
}

std::string_view EngineKindName(EngineKind kind) {
  const auto index = static_cast<int>(kind);
  return index < kNumEngineKinds ? kNames[index] : "invalid";
}

}  // namespace kvindex::wire
