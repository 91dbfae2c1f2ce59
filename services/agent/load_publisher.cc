#include "services/agent/load_publisher.h"

#include <prometheus/counter.h>

#include "shared/codec/load_codec.h"

namespace kvindex::agent {

std::unique_ptr<epp::LoadScraper> StartLoadPublisher(natsConnection* connection,
                                                     const std::string& prefix,
                                                     const std::string& node,
                                                     const std::vector<ingest::SourceSpec>& sources,
                                                     std::chrono::milliseconds interval,
                                                     prometheus::Registry* registry) {
  std::vector<epp::ScrapeTarget> targets = epp::ScrapeTargets(sources);
  if (targets.empty() || interval.count() <= 0) return nullptr;
  auto& family = prometheus::BuildCounter()
                     .Name("kvindex_agent_load_reports_total")
                     .Help("Load reports published on core NATS, by outcome")
                     .Register(*registry);
  prometheus::Counter* sent = &family.Add({{"outcome", "sent"}});
  prometheus::Counter* failed = &family.Add({{"outcome", "failed"}});
  auto sink = [connection, subject = codec::LoadSubject(prefix, node), node, sent,
               failed](const std::vector<codec::SourceLoad>& samples) {
    codec::LoadReport report;
    report.agent = node;
    report.ts_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
    report.samples = samples;
    std::string bytes;
    codec::EncodeLoadReport(report, &bytes);
    const natsStatus status = natsConnection_Publish(connection, subject.c_str(), bytes.data(),
                                                     static_cast<int>(bytes.size()));
    (status == NATS_OK ? sent : failed)->Increment();
  };
  epp::LoadScraperOptions options;
  options.interval = interval;
  auto scraper = std::make_unique<epp::LoadScraper>(std::move(targets), options, std::move(sink),
                                                    registry, "kvindex_agent");
  scraper->Start();
  return scraper;
}

}  // namespace kvindex::agent
