// The agent's load signals (docs/epp.md, "Load signals"): scrape the local
// engines' /metrics (sources with endpoint=) every --load-interval and
// publish one load report per round on core NATS, <prefix>_load.<node>
// (never JetStream: load is not state). A publish that fails (NATS away) is
// dropped: the next round's report replaces it.
#pragma once

#include <nats/nats.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shared/epp/load_scraper.h"
#include "shared/ingest/source_spec.h"

namespace kvindex::agent {

// nullptr when no source names an endpoint or `interval` is 0. `connection`
// must outlive the scraper (stop it first).
std::unique_ptr<epp::LoadScraper> StartLoadPublisher(natsConnection* connection,
                                                     const std::string& prefix,
                                                     const std::string& node,
                                                     const std::vector<ingest::SourceSpec>& sources,
                                                     std::chrono::milliseconds interval,
                                                     prometheus::Registry* registry);

}  // namespace kvindex::agent
