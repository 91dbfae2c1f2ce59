#include "shared/metrics/metrics.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>

namespace kvindex::metrics {
namespace {

TEST(MetricsTest, SerializesRegistryAndCallbackFamilies) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter()
                     .Name("kvindex_test_things_total")
                     .Help("Things counted")
                     .Register(registry);
  family.Add({{"kind", "a"}}).Increment(3);

  uint64_t live_value = 42;
  CallbackCollectable callback([&] {
    auto gauge = GaugeFamily("kvindex_test_live", "Read at scrape time");
    AddSample(gauge, static_cast<double>(live_value), {{"source", "w0"}});
    return std::vector<prometheus::MetricFamily>{gauge};
  });
  std::string text = SerializeText(registry, {&callback});
  EXPECT_NE(text.find("kvindex_test_things_total{kind=\"a\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("kvindex_test_live{source=\"w0\"} 42"), std::string::npos) << text;
  live_value = 43;
  text = SerializeText(registry, {&callback});
  EXPECT_NE(text.find("kvindex_test_live{source=\"w0\"} 43"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE kvindex_test_live gauge"), std::string::npos) << text;
}

}  // namespace
}  // namespace kvindex::metrics
