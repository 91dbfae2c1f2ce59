// CompatApi: the HTTP APIs of the routers kvindex stands in for, as thin
// codecs over the one lookup of /v1/match (query::Lookup) and its tier rules
// (docs/compat.md has the shapes, what differs and worked examples):
//
//   Dynamo's remote indexer (--remote-indexer-url):
//     POST /query_tiered_by_hash  {block_hashes: [i64], model_name, routing_group}
//                                 -> {block_size, tiered: WireTieredMatchDetails}
//   Mooncake's indexer API (RFC #1403):
//     POST /query          {model, token_ids, lora_name, tenant_id, instance_id,
//                           block_size, cache_salt} -> {tenant: {instance: {...}}}
//     POST /query_by_hash  the same with seq_hashes (rolling XXH3-64, seed 1337)
//     GET  /workers        the sources the index knows, per instance
//     POST /register      an embedded router starts following the engine (as a
//                          --source would; ApiContext::registrations);
//                          a --nats router refuses it (409) naming the
//                          agent's flags: registration belongs to agents.
//     POST /unregister     stops following it and clears what it held.
//
// Every answer is counted under kvindex_router_compat_requests_total{api,
// outcome}: "ok" or the reason of the error (docs/metrics.md).
//
// Thread safety: Register() once before the server starts; handlers run
// concurrently on the server's threads (they only read the index).
#pragma once

#include <prometheus/collectable.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "shared/http/server.h"

namespace kvindex::query {

struct ApiContext;

class CompatApi {
 public:
  enum class Api : uint8_t {
    kDynamoTiered,
    kMooncakeQuery,
    kMooncakeQueryByHash,
    kMooncakeWorkers,
    kMooncakeRegister,
    kMooncakeUnregister,
    // SGLang's KvIndexer gRPC (shared/compat/sglang_indexer.h), one per RPC.
    kSglangMatchPrefix,
    kSglangMatch,
    kSglangHitCounts,
    kSglangApplyBatch,
    kCount
  };
  enum class Outcome : uint8_t {
    kOk,
    kInvalidRequest,        // malformed JSON or a field of the wrong type (400)
    kMissingField,          // a required field absent (400)
    kTooManyHashes,         // more hashes or tokens than the limit (400)
    kUnknownModel,          // 404
    kBlockSizeMismatch,     // the request's block_size is not the model's (400)
    kUnsupportedSeed,       // Mooncake hashes with a seed we cannot map (400)
    kBlockSizeUnknown,      // model known, block size not yet (409)
    kRegistrationRefused,   // /register, /unregister: engines come from --source or agents (409)
    kUnavailable,           // anything else from the lookup (5xx)
    kModelAmbiguous,        // SGLang: several models and no --sglang-model (FAILED_PRECONDITION)
    kUnimplemented,         // SGLang: an RPC kvindex does not serve (UNIMPLEMENTED)
    kRegistrationConflict,  // /register: instance and rank taken with other fields (409)
    kTooManyRegistrations,  // /register: --max-registrations reached (409)
    kNotRegistered,         // /unregister: nothing registered under the instance (404)
    kCount
  };
  static std::string_view ApiLabel(Api api);
  static std::string_view OutcomeLabel(Outcome outcome);

  // `context` must outlive this object (RouterApi owns both).
  explicit CompatApi(const ApiContext* context);

  void Register(http::Server& server);

  // Handlers (public for tests and the benchmark).
  void QueryTieredByHash(const http::Request& request, http::Response& response) const;
  void MooncakeQuery(const http::Request& request, http::Response& response) const;
  void MooncakeQueryByHash(const http::Request& request, http::Response& response) const;
  void MooncakeWorkers(const http::Request& request, http::Response& response) const;
  void MooncakeRegister(const http::Request& request, http::Response& response) const;
  void MooncakeUnregister(const http::Request& request, http::Response& response) const;

  // Dynamo WorkerWithDpRank rows left out of an answer because the worker id
  // is not a decimal u64 (Dynamo's WorkerId): fail closed, counted.
  uint64_t workers_not_numeric() const { return workers_not_numeric_.load(); }
  uint64_t count(Api api, Outcome outcome) const;
  // Counts one answer of an API served elsewhere (the SGLang gRPC service).
  void Record(Api api, Outcome outcome) const { Count(api, outcome); }

  // kvindex_router_compat_* families, collected at scrape time.
  const prometheus::Collectable* collectable() const { return collectable_.get(); }

 private:
  void Count(Api api, Outcome outcome) const;

  const ApiContext* const context_;
  mutable std::array<std::atomic<uint64_t>,
                     static_cast<size_t>(Api::kCount) * static_cast<size_t>(Outcome::kCount)>
      counts_{};
  mutable std::atomic<uint64_t> workers_not_numeric_{0};
  std::unique_ptr<prometheus::Collectable> collectable_;
};

}  // namespace kvindex::query
