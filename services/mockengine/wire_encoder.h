// Encodes mock KV events as the msgpack KVEventBatch payloads real engines
// publish (wire-formats.md): vLLM map events (current), vLLM legacy array
// events, or SGLang map events (signed int64 hashes, attn_dp_rank).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "services/mockengine/simulated_engine.h"

namespace kvindex::mockengine {

enum class WireForm { kVllmMap, kVllmArray, kSglangMap };

// "vllm-map", "vllm-array", "sglang".
bool ParseWireForm(std::string_view name, WireForm* form);

// [ts, events, dp_rank] with every event in `form`.
std::string EncodeBatch(WireForm form, double timestamp_s, std::span<const MockEvent> events,
                        uint32_t dp_rank);

}  // namespace kvindex::mockengine
