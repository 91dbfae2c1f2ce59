// SGLang's KV indexer service in the router (--sglang-indexer ADDR;
// docs/compat.md, "SGLang"): shared/compat's codec and gRPC server over the
// router's API context, and the worker addresses its answers carry: the
// router-facing URL of each source ("http://" + its endpoint=HOST:PORT, or
// the one its agent announced on the log).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/router/embedded/sglang_bridge_ingest.h"
#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/compat/sglang_alias_map.h"
#include "shared/compat/sglang_indexer.h"
#include "shared/compat/sglang_server.h"
#include "shared/epp/endpoints.h"
#include "shared/metrics/metrics.h"
#include "shared/query/router_api.h"
#include "storage/checkpointer.h"

namespace kvindex::router {

// Source -> address, from the static endpoints (--source endpoint=) and the
// announced ones (--nats; asked again at most every 200 ms). Thread safe.
class SglangAddressBook {
 public:
  SglangAddressBook(std::vector<epp::Endpoint> static_endpoints,
                    std::function<std::vector<epp::Endpoint>()> announced);
  // "" when the source has no endpoint.
  std::string Address(const SourceKey& source);
  // "host:port" -> "http://host:port" (a scheme already there is kept).
  static std::string Url(const std::string& address);

 private:
  const std::function<std::vector<epp::Endpoint>()> announced_;
  absl::flat_hash_map<SourceKey, std::string> static_;
  Mutex mu_;
  absl::flat_hash_map<SourceKey, std::string> announced_map_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point refreshed_ ABSL_GUARDED_BY(mu_);
};

// The alias map's metrics (docs/metrics.md): kvindex_router_sglang_aliases,
// kvindex_router_sglang_alias_bytes and
// kvindex_router_sglang_aliases_refused_total{reason}, read at scrape time.
std::shared_ptr<metrics::CallbackCollectable> SglangAliasMetrics(
    std::shared_ptr<const compat::SglangAliasMap> aliases);

// The alias map in the router's checkpoints (storage/checkpointer.h):
// saved at the index's position, restored after it, carried by the export.
class SglangAliasCheckpoint : public storage::AliasCheckpoint {
 public:
  explicit SglangAliasCheckpoint(std::shared_ptr<compat::SglangAliasMap> aliases)
      : aliases_(std::move(aliases)) {}
  std::string Save() override { return aliases_->SaveState(); }
  Status Restore(std::string_view state) override { return aliases_->RestoreState(state); }

 private:
  const std::shared_ptr<compat::SglangAliasMap> aliases_;
};

class SglangService {
 public:
  // `api` must outlive the service, and `bridge` (ApplyExternalKvBatch,
  // --sglang-ingest; null = UNIMPLEMENTED) too.
  // `aliases`: SGLang's hashes -> ours (null: none).
  SglangService(const query::RouterApi* api, std::string listen, std::string model,
                std::shared_ptr<const compat::SglangAliasMap> aliases,
                std::vector<epp::Endpoint> static_endpoints,
                std::function<std::vector<epp::Endpoint>()> announced,
                SglangBridgeIngest* bridge = nullptr);
  Status Start() { return server_.Start(); }
  void Stop() { server_.Stop(); }
  int port() const { return server_.port(); }

 private:
  const std::shared_ptr<const compat::SglangAliasMap> aliases_;
  SglangAddressBook addresses_;
  compat::SglangIndexer indexer_;
  compat::SglangServer server_;
};

}  // namespace kvindex::router
