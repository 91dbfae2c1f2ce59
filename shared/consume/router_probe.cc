#include "shared/consume/router_probe.h"

#include <map>
#include <utility>

namespace kvindex::consume {
namespace {

constexpr std::string_view kStatusLabels[2] = {"applied", "ignored"};

std::string TierLabel(int tier) {
  return tier == kNumTiers ? "none" : std::string(TierName(static_cast<Tier>(tier)));
}

}  // namespace

std::string_view LogOutcomeLabel(LogOutcome outcome) {
  switch (outcome) {
    case LogOutcome::kStale:
      return "stale";
    case LogOutcome::kInvalid:
      return "invalid";
    case LogOutcome::kAgentExpired:
      return "agent_expired";
    case LogOutcome::kReadError:
      return "read_error";
    case LogOutcome::kExpiryAppended:
      return "expiry_appended";
    case LogOutcome::kResyncRequested:
      return "resync_requested";
    case LogOutcome::kPositionGap:
      return "position_gap";
    case LogOutcome::kIndexExhausted:
      return "index_exhausted";
    case LogOutcome::kExpiryReproposed:
      return "expiry_reproposed";
  }
  return "unknown";
}

std::string_view EndpointLabel(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kMatch:
      return "match";
    case Endpoint::kQuery:
      return "query";
    case Endpoint::kState:
      return "state";
    case Endpoint::kWorkers:
      return "workers";
  }
  return "unknown";
}

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void LatencyHistogram::Export(prometheus::MetricFamily& family,
                              std::vector<prometheus::ClientMetric::Label> labels) const {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    prometheus::ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < kBounds.size() ? kBounds[i] : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back(bucket);
  }
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  family.metric.push_back(std::move(metric));
}

void RouterProbe::ApplyTally::Add(const PlacementEvent& event, bool applied) {
  const bool has_tier =
      event.kind == PlacementKind::kStored || event.kind == PlacementKind::kRemoved;
  const int tier = has_tier ? static_cast<int>(event.tier) : kNumTiers;
  counts[static_cast<int>(event.kind)][applied ? 0 : 1][tier] += 1;
}

void RouterProbe::Bind(const index::IndexInterface* index, std::function<uint64_t()> pending) {
  index_ = index;
  pending_ = std::move(pending);
  collectable_ = std::make_shared<metrics::CallbackCollectable>([this] { return Collect(); });
}

void RouterProbe::RecordApply(const ApplyTally& tally, uint64_t applied_seq, double lag_seconds) {
  for (int k = 0; k < kNumPlacementKinds; ++k) {
    for (int s = 0; s < 2; ++s) {
      for (int t = 0; t <= kNumTiers; ++t) {
        if (tally.counts[k][s][t] != 0) {
          applied_[k][s][t].fetch_add(tally.counts[k][s][t], std::memory_order_relaxed);
        }
      }
    }
  }
  applied_seq_.store(applied_seq, std::memory_order_relaxed);
  lag_seconds_.store(lag_seconds, std::memory_order_relaxed);
}

void RouterProbe::RecordRequest(Endpoint endpoint, int status) {
  const int cls = status >= 500 ? 2 : (status >= 400 ? 1 : 0);
  requests_[static_cast<int>(endpoint)][cls].fetch_add(1, std::memory_order_relaxed);
}

std::vector<prometheus::MetricFamily> RouterProbe::Collect() const {
  std::vector<prometheus::MetricFamily> out;

  auto applied = metrics::CounterFamily(
      "kvindex_router_events_applied_total",
      "Placement events taken from the log, by event type, outcome (applied, or ignored "
      "because at or below the applied position) and tier (none for untiered events)");
  for (int k = 0; k < kNumPlacementKinds; ++k) {
    const bool tiered = k == static_cast<int>(PlacementKind::kStored) ||
                        k == static_cast<int>(PlacementKind::kRemoved);
    for (int s = 0; s < 2; ++s) {
      for (int t = tiered ? 0 : kNumTiers; t <= (tiered ? kNumTiers - 1 : kNumTiers); ++t) {
        metrics::AddSample(
            applied, static_cast<double>(applied_[k][s][t].load()),
            {{"event_type", std::string(PlacementKindName(static_cast<PlacementKind>(k)))},
             {"status", std::string(kStatusLabels[s])},
             {"tier", TierLabel(t)}});
      }
    }
  }
  out.push_back(std::move(applied));

  auto log_outcomes = metrics::CounterFamily(
      "kvindex_router_log_messages_total",
      "Log messages by outcome other than applied: stale (skipped), invalid (undecodable), "
      "agent_expired (an agent's sources cleared by liveness), read_error, expiry_appended, "
      "expiry_reproposed and resync_requested (messages this router appended)");
  for (int o = 0; o < kNumLogOutcomes; ++o) {
    metrics::AddSample(log_outcomes, static_cast<double>(log_[o].load()),
                       {{"outcome", std::string(LogOutcomeLabel(static_cast<LogOutcome>(o)))}});
  }
  out.push_back(std::move(log_outcomes));

  auto refused = metrics::CounterFamily(
      "kvindex_router_log_messages_refused_total",
      "Log messages dropped whole, before any event was applied, because they may not speak "
      "for what they say (docs/security.md), by reason");
  for (int r = 0; r < kNumLogRefusals; ++r) {
    metrics::AddSample(refused, static_cast<double>(refused_[r].load()),
                       {{"reason", std::string(LogRefusalLabel(static_cast<LogRefusal>(r)))}});
  }
  out.push_back(std::move(refused));

  auto lag_messages = metrics::GaugeFamily(
      "kvindex_router_apply_lag_messages",
      "Log messages (JetStream) or events (embedded) in the log and not applied yet");
  metrics::AddSample(lag_messages, pending_ ? static_cast<double>(pending_()) : 0.0);
  out.push_back(std::move(lag_messages));

  auto lag_seconds = metrics::GaugeFamily(
      "kvindex_router_apply_lag_seconds",
      "Age of the newest applied event when it was applied (router clock minus agent timestamp)");
  metrics::AddSample(lag_seconds, lag_seconds_.load());
  out.push_back(std::move(lag_seconds));

  auto sequence = metrics::GaugeFamily("kvindex_router_stream_sequence",
                                       "Log position of the last applied event (applied_seq)");
  metrics::AddSample(sequence, static_cast<double>(applied_seq_.load()));
  out.push_back(std::move(sequence));

  prometheus::MetricFamily lookup;
  lookup.name = "kvindex_router_lookup_duration_seconds";
  lookup.help = "Index lookup time per query (hashing + match), by endpoint";
  lookup.type = prometheus::MetricType::Histogram;
  lookup_[static_cast<int>(Endpoint::kMatch)].Export(lookup, {{"endpoint", "match"}});
  lookup_[static_cast<int>(Endpoint::kQuery)].Export(lookup, {{"endpoint", "query"}});
  out.push_back(std::move(lookup));

  auto requests = metrics::CounterFamily("kvindex_router_http_requests_total",
                                         "API requests by endpoint and status class");
  static constexpr std::string_view kClasses[3] = {"2xx", "4xx", "5xx"};
  for (int e = 0; e < kNumEndpoints; ++e) {
    for (int c = 0; c < 3; ++c) {
      metrics::AddSample(requests, static_cast<double>(requests_[e][c].load()),
                         {{"endpoint", std::string(EndpointLabel(static_cast<Endpoint>(e)))},
                          {"code", std::string(kClasses[c])}});
    }
  }
  out.push_back(std::move(requests));

  if (index_ != nullptr) {
    const index::IndexStats stats = index_->Stats();
    std::map<std::string, std::array<uint64_t, kNumTiers>> per_model;
    for (const std::string& model : index_->Models()) per_model[model] = {};
    for (const index::SourceInfo& info : index_->Sources()) {
      auto& row = per_model[info.model];
      for (int t = 0; t < kNumTiers; ++t) row[t] += info.entries[t];
    }
    auto entries = metrics::GaugeFamily("kvindex_router_index_entries",
                                        "(source, block) entries held, by model and tier");
    for (const auto& [model, row] : per_model) {
      for (int t = 0; t < kNumTiers; ++t) {
        metrics::AddSample(entries, static_cast<double>(row[t]),
                           {{"model", model}, {"tier", TierLabel(t)}});
      }
    }
    out.push_back(std::move(entries));

    uint64_t total = 0;
    for (int t = 0; t < kNumTiers; ++t) total += stats.entries[t];
    auto bytes = metrics::GaugeFamily("kvindex_router_index_bytes",
                                      "Bytes allocated by the index structures");
    metrics::AddSample(bytes, static_cast<double>(stats.bytes_allocated));
    out.push_back(std::move(bytes));
    auto per_entry = metrics::GaugeFamily(
        "kvindex_router_index_bytes_per_entry",
        "Bytes allocated by the index divided by the number of entries (0 when empty)");
    metrics::AddSample(
        per_entry,
        total == 0 ? 0.0 : static_cast<double>(stats.bytes_allocated) / static_cast<double>(total));
    out.push_back(std::move(per_entry));
    auto sources =
        metrics::GaugeFamily("kvindex_router_index_sources", "Sources holding at least one entry");
    metrics::AddSample(sources, static_cast<double>(stats.sources));
    out.push_back(std::move(sources));
    // What the index refused (fail closed): counted, never silent.
    auto refused = [&](const char* name, const char* help, uint64_t value) {
      auto family = metrics::CounterFamily(name, help);
      metrics::AddSample(family, static_cast<double>(value));
      out.push_back(std::move(family));
    };
    refused("kvindex_router_index_events_over_source_limit_total",
            "Stored events not indexed because their model already holds 4096 sources (fail "
            "closed)",
            stats.events_over_source_limit);
    refused("kvindex_router_index_events_over_model_limit_total",
            "Stored events not indexed because the index already holds --max-models models (fail "
            "closed)",
            stats.events_over_model_limit);
    refused("kvindex_router_index_blocks_not_indexed_total",
            "Blocks of stored events not indexed because their model's index memory ran out "
            "(fail closed)",
            stats.blocks_not_indexed);
    refused("kvindex_router_index_sources_cleared_on_exhaustion_total",
            "Sources cleared from a model because a removal found no memory to split a node "
            "(fail closed)",
            stats.sources_cleared_on_exhaustion);
  }
  return out;
}

}  // namespace kvindex::consume
