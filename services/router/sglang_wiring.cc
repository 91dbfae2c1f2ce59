#include "services/router/sglang_wiring.h"

#include <utility>

namespace kvindex::router {

SglangAddressBook::SglangAddressBook(std::vector<epp::Endpoint> static_endpoints,
                                     std::function<std::vector<epp::Endpoint>()> announced)
    : announced_(std::move(announced)) {
  for (const epp::Endpoint& e : static_endpoints) static_.try_emplace(e.source, Url(e.address));
}

std::string SglangAddressBook::Url(const std::string& address) {
  if (address.empty() || address.find("://") != std::string::npos) return address;
  return "http://" + address;
}

std::string SglangAddressBook::Address(const SourceKey& source) {
  if (auto it = static_.find(source); it != static_.end()) return it->second;
  if (!announced_) return "";
  MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - refreshed_ > std::chrono::milliseconds(200)) {
    announced_map_.clear();
    for (const epp::Endpoint& e : announced_()) {
      announced_map_.try_emplace(e.source, Url(e.address));
    }
    refreshed_ = now;
  }
  auto it = announced_map_.find(source);
  return it == announced_map_.end() ? "" : it->second;
}

std::shared_ptr<metrics::CallbackCollectable> SglangAliasMetrics(
    std::shared_ptr<const compat::SglangAliasMap> aliases) {
  return std::make_shared<metrics::CallbackCollectable>([aliases = std::move(aliases)] {
    const compat::SglangAliasStats stats = aliases->Stats();
    std::vector<prometheus::MetricFamily> out;
    out.push_back(metrics::GaugeFamily(
        "kvindex_router_sglang_aliases",
        "SGLang block hashes this router translates to its own (sgl-router's hashes)"));
    metrics::AddSample(out.back(), static_cast<double>(stats.entries));
    out.push_back(metrics::GaugeFamily("kvindex_router_sglang_alias_bytes",
                                       "Bytes of the SGLang alias tables"));
    metrics::AddSample(out.back(), static_cast<double>(stats.bytes));
    out.push_back(metrics::CounterFamily(
        "kvindex_router_sglang_aliases_refused_total",
        "SGLang aliases not kept, by reason (mismatch: a stored event's sglang_hashes "
        "count is not its blocks'; full: the cap; conflict: one hash, two blocks; "
        "poisoned: the hash or its model's poisoned set is closed)"));
    metrics::AddSample(out.back(), static_cast<double>(stats.refused_mismatch),
                       {{"reason", "mismatch"}});
    metrics::AddSample(out.back(), static_cast<double>(stats.refused_full), {{"reason", "full"}});
    metrics::AddSample(out.back(), static_cast<double>(stats.conflicts), {{"reason", "conflict"}});
    metrics::AddSample(out.back(), static_cast<double>(stats.refused_poisoned),
                       {{"reason", "poisoned"}});
    out.push_back(
        metrics::GaugeFamily("kvindex_router_sglang_poisoned_hashes",
                             "SGLang hashes never aliased again after a conflict (fail closed)"));
    metrics::AddSample(out.back(), static_cast<double>(stats.poisoned));
    return out;
  });
}

SglangService::SglangService(const query::RouterApi* api, std::string listen, std::string model,
                             std::shared_ptr<const compat::SglangAliasMap> aliases,
                             std::vector<epp::Endpoint> static_endpoints,
                             std::function<std::vector<epp::Endpoint>()> announced,
                             SglangBridgeIngest* bridge)
    : aliases_(std::move(aliases)),
      addresses_(std::move(static_endpoints), std::move(announced)),
      indexer_(&api->context(),
               compat::SglangOptions{
                   .model = std::move(model),
                   .address =
                       [this, bridge](const SourceKey& source) {
                         std::string address = addresses_.Address(source);
                         if (address.empty() && bridge != nullptr) {
                           address = bridge->Address(source);
                         }
                         return address;
                       },
                   .apply_batch = bridge == nullptr
                                      ? std::function<compat::SglangStatus(
                                            const compat::pb::ApplyExternalKvBatchRequest&)>()
                                      : [bridge](const compat::pb::ApplyExternalKvBatchRequest&
                                                     r) { return bridge->Apply(r); },
                   .aliases = aliases_.get()}),
      server_(compat::SglangServerOptions{.listen = std::move(listen)}, &indexer_, &api->compat()) {
}

}  // namespace kvindex::router
