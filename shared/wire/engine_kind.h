// EngineKind: which inference engine publishes a KV-event stream.
//
// The three engines share one wire grammar (docs/wire-format.md) and one
// decoder (batch_decoder.h); the kind labels metrics, selects per-engine
// expectations (TensorRT-LLM heartbeats) and names the engine on the CLI
// (`--engine vllm|sglang|trtllm`, `engine=` in --source).
//
//   auto kind = EngineKindFromName("sglang");   // EngineKind::kSglang
//   EngineKindName(*kind);                      // "sglang"
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvindex::wire {

enum class EngineKind : uint8_t { kVllm, kSglang, kTrtllm };
inline constexpr int kNumEngineKinds = 3;

// Exact, lower-case names: "vllm", "sglang", "trtllm"; nullopt otherwise.
std::optional<EngineKind> EngineKindFromName(std::string_view name);

// "vllm", "sglang", "trtllm" (the metric label and CLI spelling).
std::string_view EngineKindName(EngineKind kind);

}  // namespace kvindex::wire
