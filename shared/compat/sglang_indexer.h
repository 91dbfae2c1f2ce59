// SglangIndexer: SGLang's KV indexer API (sgl-kv-indexer's `KVIndexer` gRPC
// service, proto/kv_indexer.proto; docs/compat.md, "SGLang") as a thin codec
// over the one lookup of /v1/match (query::Lookup) and its tier rules. No
// gRPC here: sglang_server.h carries these answers on the wire.
//
//   MatchExternalKvPrefix  hashes in prompt order -> per worker address the
//                          longest prefix it holds (/v1/match's `longest`),
//                          sorted by it descending; best_prefix_blocks;
//                          blocks_read = the hashes considered.
//   MatchExternalKv        per worker, per tier, which of the hashes it holds
//                          (each in its fastest tier), one lookup per hash.
//   GetExternalKvHitCounts the hits MatchExternalKv counted (count_as_hit).
//
// Hashes are sfixed64 (their current .proto); each is translated through
// the SGLang alias map (sglang_alias_map.h: sgl-router's own SHA-256 page
// hashes, learned from the agents' events) when it has an alias, else
// looked up as our canonical sequence hash (compat::FromSglangI64). The model is the one set
// (--sglang-model), else the one model the router knows. Limits and errors
// are SGLang's service's: empty hashes INVALID_ARGUMENT; more than 16,384
// hashes for MatchExternalKv / GetExternalKvHitCounts RESOURCE_EXHAUSTED
// (the prefix query has no hash ceiling, only the 8 MiB message limit).
//
// Thread safety: every method may run concurrently (the index is read
// lock-free; the hit counters have their own mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "kv_indexer.pb.h"
#include "shared/base/mutex.h"
#include "shared/compat/sglang_alias_map.h"
#include "shared/model/source_key.h"
#include "shared/query/compat_api.h"
#include "shared/query/router_api.h"

namespace kvindex::compat {

namespace pb = ::kv_indexer::v1;

// SGLang's per-request hash ceiling (MAX_HASHES_PER_REQUEST).
inline constexpr size_t kSglangMaxHashes = 16384;
// SGLang's server decoding limit (MAX_GRPC_DECODING_MESSAGE_SIZE).
inline constexpr size_t kSglangMaxMessageBytes = size_t{8} << 20;
// Distinct hashes with a hit counter; past it new hashes are not counted
// (an undercount, never unbounded memory).
inline constexpr size_t kSglangMaxHitCounters = size_t{1} << 20;

// The gRPC status codes SGLang's service answers with (grpc::StatusCode values).
enum class SglangCode : int {
  kOk = 0,
  kInvalidArgument = 3,
  kFailedPrecondition = 9,
  kResourceExhausted = 8,
  kUnimplemented = 12,
  kUnavailable = 14,
};

struct SglangStatus {
  SglangCode code = SglangCode::kOk;
  // What kvindex_router_compat_requests_total counts (ok or the reason).
  query::CompatApi::Outcome outcome = query::CompatApi::Outcome::kOk;
  std::string message;
  bool ok() const { return code == SglangCode::kOk; }
};

struct SglangOptions {
  // --sglang-model: the model the hashes belong to; "" = the one model the
  // router knows (several: FAILED_PRECONDITION naming them).
  std::string model;
  // The router-facing address of a source (the worker URL sgl-router
  // registered, e.g. "http://10.0.0.1:30000"); "" = unroutable, the row is
  // left out (as SGLang leaves out workers without an address). Required.
  std::function<std::string(const SourceKey&)> address;
  // ApplyExternalKvBatch (their bridge's ingest) when the router takes it
  // (--sglang-ingest, an embedded router); null = UNIMPLEMENTED.
  std::function<SglangStatus(const pb::ApplyExternalKvBatchRequest&)> apply_batch;
  // SGLang's own block hashes -> ours, learned from the log (sgl-router's
  // hashes); null = none. A hash without an alias is taken as ours. Must
  // outlive the indexer.
  const SglangAliasMap* aliases = nullptr;
};

class SglangIndexer {
 public:
  // `context` must outlive this object (the router's API owns it).
  SglangIndexer(const query::ApiContext* context, SglangOptions options);

  SglangStatus MatchPrefix(const pb::MatchExternalKvPrefixRequest& request,
                           pb::MatchExternalKvPrefixResponse* response) const;
  SglangStatus Match(const pb::MatchExternalKvRequest& request,
                     pb::MatchExternalKvResponse* response);
  SglangStatus HitCounts(const pb::GetExternalKvHitCountsRequest& request,
                         pb::GetExternalKvHitCountsResponse* response) const;
  // Their bridge's ingest: options.apply_batch when set (--sglang-ingest);
  // otherwise UNIMPLEMENTED naming --source and kvindex-agent.
  SglangStatus ApplyBatch(const pb::ApplyExternalKvBatchRequest& request) const;

  // The worker_id kvindex reports for a source: the worker, with ":dpN"
  // for ranks above 0.
  static std::string WorkerId(const SourceKey& source);

 private:
  // The model to look up in; false with *status set when there is none to
  // pick (several known, none set).
  bool PickModel(std::string* model, SglangStatus* status) const;

  const query::ApiContext* const context_;
  const SglangOptions options_;
  mutable Mutex hits_mu_;
  absl::flat_hash_map<uint64_t, uint64_t> hits_ ABSL_GUARDED_BY(hits_mu_);
};

}  // namespace kvindex::compat
