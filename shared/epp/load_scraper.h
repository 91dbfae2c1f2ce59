// LoadScraper: every `interval`, GETs each engine's Prometheus /metrics and
// hands the loads to `sink` (docs/epp.md, "Load signals"). The agent
// publishes them on core NATS; an embedded router feeds its LoadTable.
// Sources sharing an endpoint (the ranks of dp_ranks=N) are scraped once.
// An engine that does not answer, or answers an error, is reported
// unhealthy (counted).
//
//   LoadScraper scraper(ScrapeTargets(specs), {.interval = 50ms}, sink, "kvindex_agent");
//   scraper.Start();  ... scraper.Stop();
//
// Thread safety: Start/Stop from one thread; the sink runs on the scraper's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "prometheus/registry.h"
#include "shared/base/stop_signal.h"
#include "shared/codec/load_codec.h"
#include "shared/http/client.h"
#include "shared/ingest/source_spec.h"

namespace kvindex::epp {

struct ScrapeTarget {
  SourceKey source;
  std::string endpoint;  // "host:port": GET http://host:port/metrics
};

// One target per source with endpoint=.
std::vector<ScrapeTarget> ScrapeTargets(const std::vector<ingest::SourceSpec>& specs);

struct LoadScraperOptions {
  // Time between rounds. Default: 50 ms.
  std::chrono::milliseconds interval{50};
  // Deadline of one GET. Default: 250 ms.
  std::chrono::milliseconds timeout{250};
  // Largest /metrics body read. Default: 4 MiB.
  uint64_t max_bytes = uint64_t{4} << 20;
};

class LoadScraper {
 public:
  using Sink = std::function<void(const std::vector<codec::SourceLoad>&)>;
  // `registry` (nullable) gets <metric_prefix>_load_scrapes_total{outcome}.
  LoadScraper(std::vector<ScrapeTarget> targets, LoadScraperOptions options, Sink sink,
              prometheus::Registry* registry, const std::string& metric_prefix);
  ~LoadScraper();
  LoadScraper(const LoadScraper&) = delete;
  LoadScraper& operator=(const LoadScraper&) = delete;

  void Start();
  void Stop();
  // One round now, on the calling thread (tests).
  void ScrapeOnce();

 private:
  void Run();

  const std::vector<ScrapeTarget> targets_;
  const LoadScraperOptions options_;
  const Sink sink_;
  prometheus::Counter* ok_ = nullptr;
  prometheus::Counter* failed_ = nullptr;
  std::thread thread_;
  StopSignal stop_;
  std::atomic<bool> stopping_{false};
};

}  // namespace kvindex::epp
