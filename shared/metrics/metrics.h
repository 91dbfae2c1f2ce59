// Prometheus metrics shared by both services.
//
// Components receive a prometheus::Registry and register their families in a
// *_probe.{h,cc} of their own (names kvindex_<service>_<what>_<unit>,
// counters end in _total). Hot loops keep plain counters and export them at
// scrape time through a CallbackCollectable instead of touching prometheus
// objects per block.
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   registry->Register(...);   // or registry->... families
//   std::string body = metrics::SerializeText(*registry);  // GET /metrics
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <functional>
#include <string>
#include <vector>

namespace kvindex::metrics {

// The Prometheus text exposition format (version 0.0.4) of everything in
// `registry` and in the extra collectables.
std::string SerializeText(prometheus::Registry& registry,
                          const std::vector<const prometheus::Collectable*>& extra = {});

// The content type to serve SerializeText with.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// A Collectable whose families are produced by a callback at scrape time.
// Thread safety: the callback runs on the scraping thread; it must only read
// state that is safe to read concurrently (atomics, or under its own lock).
class CallbackCollectable final : public prometheus::Collectable {
 public:
  using Callback = std::function<std::vector<prometheus::MetricFamily>()>;
  explicit CallbackCollectable(Callback callback) : callback_(std::move(callback)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return callback_(); }

 private:
  Callback callback_;
};

// Builders for families filled at scrape time.
prometheus::MetricFamily CounterFamily(std::string name, std::string help);
prometheus::MetricFamily GaugeFamily(std::string name, std::string help);
// Appends one sample with labels to a counter or gauge family.
void AddSample(prometheus::MetricFamily& family, double value,
               std::vector<prometheus::ClientMetric::Label> labels = {});

}  // namespace kvindex::metrics
