#include "shared/metrics/metrics.h"

#include <prometheus/text_serializer.h>

namespace kvindex::metrics {

std::string SerializeText(prometheus::Registry& registry,
                          const std::vector<const prometheus::Collectable*>& extra) {
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  for (const prometheus::Collectable* collectable : extra) {
    auto more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

prometheus::MetricFamily CounterFamily(std::string name, std::string help) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Counter;
  return family;
}

prometheus::MetricFamily GaugeFamily(std::string name, std::string help) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  return family;
}

void AddSample(prometheus::MetricFamily& family, double value,
               std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

}  // namespace kvindex::metrics
