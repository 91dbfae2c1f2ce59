// Turns Mooncake hash ids into deterministic token ids: each id stands for
// one 512-token block of prefix, so equal ids give equal tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/trace/mooncake_trace.h"

namespace kvindex::mockengine {

inline constexpr uint32_t kTokensPerHashId = 512;

// The prompt of `request`: 512 tokens per hash id, cut to input_length when
// that is shorter.
std::vector<uint32_t> PromptTokens(const trace::TraceRequest& request);

}  // namespace kvindex::mockengine
