// ParseEngineMetrics: an inference engine's load from its Prometheus text
// /metrics (docs/epp.md, "Load signals"):
//   waiting: vllm:num_requests_waiting, sglang:num_queue_reqs
//   running: vllm:num_requests_running, sglang:num_running_reqs
//   kv_use:  vllm:kv_cache_usage_perc (older vllm:gpu_cache_usage_perc),
//            sglang:token_usage (fractions 0..1)
// Series of one name (label sets: models, DP engines) add up for the counts;
// kv_use is the largest. A gauge not present stays -1 (not reported).
#pragma once

#include <string_view>

#include "shared/codec/load_codec.h"

namespace kvindex::epp {

codec::EngineLoad ParseEngineMetrics(std::string_view text);

}  // namespace kvindex::epp
