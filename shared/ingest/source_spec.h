// SourceSpec: one engine publisher the agent subscribes to, and the parser of
// the `--source` flag (`kvindex-agent --help`, docs/operations.md).
//
//   KVINDEX_ASSIGN_OR_RETURN(std::vector<SourceSpec> specs,
//       ParseSourceSpec("worker=w0,engine=vllm,model=M,block_size=16,"
//                       "pub=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,dp_ranks=2"));
//   // -> two specs: dp_rank 0 on :5557/:5558, dp_rank 1 on :5558/:5559
//
// Keys: worker, engine (vllm|sglang|trtllm), model, block_size, pub are
// required; replay (empty or absent = no replay socket), dp_ranks (N >= 1,
// default 1) and dp_rank (the rank of a single-rank source, default 0) are
// optional, and so is endpoint (HOST:PORT of the engine's OpenAI server,
// for the endpoint picker; every rank of dp_ranks=N shares it). `pub=bind:tcp://...` makes the
// agent bind its SUB socket (the engine connects); otherwise it connects (the engine binds).
// Unknown or repeated keys are errors: a typo must not silently drop a setting.
//
// Thread safety: plain values and a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/wire/engine_kind.h"

namespace kvindex::ingest {

// Most ranks one worker may declare (dp_ranks=) or one undeclared socket may
// name in its first envelope.
inline constexpr uint32_t kMaxDpRanks = 1024;
// Longest model name: it travels in every published message (NATS's default
// max_payload is 1 MiB); on subjects a long name becomes a bounded hashed
// token (nats::ModelToken).
inline constexpr size_t kMaxModelBytes = 64 * 1024;

struct SourceSpec {
  // Worker id from configuration (pod / endpoint name). Required.
  std::string worker;
  wire::EngineKind engine = wire::EngineKind::kVllm;
  // Model served by the worker; one block size per model. Required.
  std::string model;
  // Tokens per block of `model`. Required, > 0.
  uint32_t block_size = 0;
  // ZMQ endpoint of the engine's PUB socket (without the `bind:` prefix).
  std::string pub_endpoint;
  // True: the agent binds `pub_endpoint` and the engine connects.
  bool pub_bind = false;
  // ZMQ endpoint of the engine's replay ROUTER socket; empty = none.
  std::string replay_endpoint;
  // Data-parallel rank of this publisher. Default: 0.
  uint32_t dp_rank = 0;
  // Ranks declared for the worker (dp_ranks=N; 1 when absent). Batch
  // envelopes may name ranks in [0, max(dp_ranks, dp_rank + 1)); others are
  // dropped (rank_out_of_range), so a bad envelope cannot create sources.
  uint32_t dp_ranks = 1;
  // True when --source said dp_rank= or dp_ranks=. A socket without a
  // declared rank (several --source entries naming one worker, one per
  // DP-rank endpoint) serves the one rank its first envelope names, below
  // kMaxDpRanks, and drops batches of any other rank (rank_out_of_range):
  // one publisher, one rank.
  bool rank_declared = false;
  // Blocks the source may hold per tier (AgentOptions::max_blocks_per_tier,
  // set by the pipeline, not by --source); 0 = no cap.
  uint64_t max_blocks_per_tier = 0;
  // report_mode=full: the engine re-announces reused blocks (vLLM
  // kv_cache_report_mode="full"); device-tier counts saturate at 1
  // (semantics.md section 3). Default: exact (report_mode=exact).
  bool report_full = false;
  // endpoint=HOST:PORT: the engine's OpenAI server, where the endpoint
  // picker sends the source's requests (docs/epp.md). "" = none.
  std::string endpoint;

  friend bool operator==(const SourceSpec&, const SourceSpec&) = default;
};

// Parses one --source value. InvalidArgument names the offending key or value.
// dp_ranks=N expands into N specs on consecutive pub/replay ports (tcp
// endpoints with a numeric port only) with dp_rank 0..N-1.
StatusOr<std::vector<SourceSpec>> ParseSourceSpec(std::string_view text);

// Formats a spec back into --source syntax (one rank, no dp_ranks).
std::string FormatSourceSpec(const SourceSpec& spec);

// "w0/0": the `source` label of the agent's metrics and log lines.
std::string SourceLabel(const SourceSpec& spec);

}  // namespace kvindex::ingest
