// SglangBridgeIngest: SGLang's ApplyExternalKvBatch (their KV-event bridge's
// ingest into sgl-kv-indexer; docs/compat.md, "SGLang") as a source of an
// embedded router's in-process log (--sglang-ingest; off by default).
//
//   SglangBridgeIngest bridge(options, &sink);
//   compat::SglangStatus s = bridge.Apply(request);   // any gRPC thread
//
// Each worker_id is one source (worker_id, dp_rank 0) of the model the
// SGLang service answers for (--sglang-model, else the one model the router
// knows; its block size must be known). Actions: REPORT -> stored, REVOKE ->
// removed, CLEAR_ALL_AT_TIER -> cleared (the whole source: an undercount,
// never a block kept that the bridge dropped). Hashes are taken as our
// canonical sequence hashes (compat::FromSglangI64), as the SGLang match
// RPCs read them.
//
// Bounded and fail closed: at most kMaxActions actions, each with a tier in
// 1..3 (TIER_HBM, TIER_DRAM, TIER_SSD) and at most kSglangMaxHashes hashes;
// the batch is checked whole before anything is applied (INVALID_ARGUMENT
// otherwise). At most max_workers live workers (RESOURCE_EXHAUSTED past
// it): a worker whose batch ends cleared (CLEAR_ALL_AT_TIER, no report
// after it) holds nothing and frees its slot, so churning worker ids never
// exhaust the cap (a worker whose blocks were all revoked one by one keeps
// its slot: the bridge does not count blocks). No worker id of another
// source (SglangBridgeOptions::reserved). A worker's first batch (also its
// first after its slot was freed), a sequence gap and a sequence going back
// (a restarted bridge) clear the source before the batch is applied.
//
// Thread safety: Apply and Address from any thread. publish_mu_ orders the
// batches (published in the order they are applied, held while Publish
// waits on a full log); mu_ guards the workers and is never held while
// publishing, so Address (every row of every SGLang match RPC) never waits
// on the log.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/compat/sglang_indexer.h"
#include "shared/publish/in_process_sink.h"

namespace kvindex::router {

struct SglangBridgeOptions {
  // Agent id stamped into the events ("<node>/sglang-bridge").
  std::string node;
  // The model the batches belong to and its block size (nullopt: none to
  // pick, or its block size unknown yet: FAILED_PRECONDITION with *why set).
  std::function<std::optional<std::pair<std::string, uint32_t>>(std::string* why)> model;
  // Live workers (holding blocks) at once. Default: 1024.
  uint32_t max_workers = 1024;
  // True for a worker id another source of the log owns (a --source worker,
  // a registered instance): its batches are refused (FAILED_PRECONDITION,
  // registration_conflict), or they would clear and rewrite that engine's
  // entries through the trusted in-process log. Called without mu_, after
  // the worker's slot is claimed (see InUse); null = none.
  std::function<bool(const std::string& worker)> reserved;
};

class SglangBridgeIngest {
 public:
  static constexpr int kMaxActions = 256;
  static constexpr size_t kMaxWorkerIdBytes = 1024;

  // `sink` must outlive this object.
  SglangBridgeIngest(SglangBridgeOptions options, InProcessSink* sink);

  compat::SglangStatus Apply(const compat::pb::ApplyExternalKvBatchRequest& request);
  // True while `worker` holds a slot (the name is the bridge's: a
  // registration of it is refused). Takes mu_ only.
  bool InUse(const std::string& worker) const;
  // The worker_address a worker's last batch gave ("" = none).
  std::string Address(const SourceKey& source) const;

 private:
  struct Worker {
    uint64_t last_seq = 0;
    std::string address;
    // A report since its last clear (else the slot is freed after the batch).
    bool may_hold = false;
  };
  const SglangBridgeOptions options_;
  InProcessSink* const sink_;
  Mutex publish_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  // Written by Apply only (under publish_mu_ and mu_).
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_id_ ABSL_GUARDED_BY(publish_mu_);
};

}  // namespace kvindex::router
