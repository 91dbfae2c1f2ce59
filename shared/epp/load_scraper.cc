#include "shared/epp/load_scraper.h"

#include <prometheus/counter.h>

#include "absl/container/flat_hash_map.h"
#include "shared/epp/engine_metrics.h"
#include "shared/log/log.h"

namespace kvindex::epp {

std::vector<ScrapeTarget> ScrapeTargets(const std::vector<ingest::SourceSpec>& specs) {
  std::vector<ScrapeTarget> out;
  for (const ingest::SourceSpec& spec : specs) {
    if (spec.endpoint.empty()) continue;
    ScrapeTarget& target = out.emplace_back();
    target.source = SourceKey{spec.worker, spec.dp_rank};
    target.endpoint = spec.endpoint;
  }
  return out;
}

LoadScraper::LoadScraper(std::vector<ScrapeTarget> targets, LoadScraperOptions options, Sink sink,
                         prometheus::Registry* registry, const std::string& metric_prefix)
    : targets_(std::move(targets)), options_(options), sink_(std::move(sink)) {
  if (registry != nullptr) {
    auto& family = prometheus::BuildCounter()
                       .Name(metric_prefix + "_load_scrapes_total")
                       .Help("Engine /metrics scrapes for load signals, by outcome")
                       .Register(*registry);
    ok_ = &family.Add({{"outcome", "ok"}});
    failed_ = &family.Add({{"outcome", "failed"}});
  }
}

LoadScraper::~LoadScraper() { Stop(); }

void LoadScraper::Start() {
  if (targets_.empty() || thread_.joinable()) return;
  stop_.Reset();
  stopping_.store(false);
  thread_ = std::thread([this] { Run(); });
}

void LoadScraper::Stop() {
  stopping_.store(true);
  stop_.Raise();
  if (thread_.joinable()) thread_.join();
}

void LoadScraper::Run() {
  auto next = std::chrono::steady_clock::now();
  while (!stop_.WaitUntil(next)) {
    next += options_.interval;
    ScrapeOnce();
    // A round that took longer than the interval starts the next at once,
    // without a burst of catch-up rounds.
    next = std::max(next, std::chrono::steady_clock::now());
  }
}

void LoadScraper::ScrapeOnce() {
  absl::flat_hash_map<std::string, codec::EngineLoad> by_endpoint;
  std::vector<codec::SourceLoad> samples;
  samples.reserve(targets_.size());
  for (const ScrapeTarget& target : targets_) {
    auto it = by_endpoint.find(target.endpoint);
    if (it == by_endpoint.end()) {
      codec::EngineLoad load;
      load.healthy = false;
      StatusOr<http::Url> url = http::ParseUrl(target.endpoint);
      if (url.ok()) {
        http::ClientRequest request;
        request.url = *url;
        request.path = "/metrics";
        request.timeout = options_.timeout;
        request.max_response_bytes = options_.max_bytes;
        request.cancel = &stopping_;
        StatusOr<http::ClientResponse> reply = http::Fetch(request);
        if (reply.ok() && reply->status == 200) {
          load = ParseEngineMetrics(reply->body);
          load.healthy = true;
        }
      }
      if (load.healthy && ok_ != nullptr) ok_->Increment();
      if (!load.healthy && failed_ != nullptr) failed_->Increment();
      it = by_endpoint.emplace(target.endpoint, load).first;
    }
    samples.push_back({target.source, it->second});
  }
  if (!stopping_.load()) sink_(samples);
}

}  // namespace kvindex::epp
