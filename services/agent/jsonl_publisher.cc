#include "services/agent/jsonl_publisher.h"

#include <nlohmann/json.hpp>

namespace kvindex::agent {

std::string PlacementEventJson(const PlacementEvent& event) {
  nlohmann::ordered_json j;
  j["kind"] = std::string(PlacementKindName(event.kind));
  j["agent"] = event.agent;
  j["event_id"] = event.event_id;
  j["timestamp_ns"] = event.timestamp_ns;
  switch (event.kind) {
    case PlacementKind::kStored:
    case PlacementKind::kRemoved:
      j["model"] = event.model;
      j["worker"] = event.source.worker;
      j["dp_rank"] = event.source.dp_rank;
      j["tier"] = std::string(TierName(event.tier));
      if (event.kind == PlacementKind::kStored) {
        j["block_size"] = event.block_size;
        j["parent_hash"] = event.parent_hash ? nlohmann::ordered_json(*event.parent_hash)
                                             : nlohmann::ordered_json(nullptr);
      }
      j["block_hashes"] = event.block_hashes;
      break;
    case PlacementKind::kCleared:
    case PlacementKind::kWorkerExpired:
      j["model"] = event.model;
      j["worker"] = event.source.worker;
      j["dp_rank"] = event.source.dp_rank;
      break;
    case PlacementKind::kHeartbeat: {
      j["lease_ms"] = event.lease_ms;
      nlohmann::ordered_json sources = nlohmann::ordered_json::array();
      for (const SourceKey& key : event.sources) {
        sources.push_back({{"worker", key.worker}, {"dp_rank", key.dp_rank}});
      }
      j["sources"] = std::move(sources);
      break;
    }
    case PlacementKind::kAgentExpired:
      j["heartbeat_seq"] = event.heartbeat_seq;
      break;
  }
  // Worker ids come from configuration, but never let a bad byte abort.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status JsonlPublisher::Publish(std::span<const PlacementEvent> events) {
  MutexLock lock(&mu_);
  buffer_.clear();
  for (const PlacementEvent& event : events) {
    buffer_ += PlacementEventJson(event);
    buffer_ += '\n';
  }
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), out_) != buffer_.size() ||
      std::fflush(out_) != 0) {
    return absl::UnavailableError("cannot write placement events to the output stream");
  }
  return absl::OkStatus();
}

Status JsonlPublisher::Flush() {
  MutexLock lock(&mu_);
  if (std::fflush(out_) != 0) return absl::UnavailableError("cannot flush the output stream");
  return absl::OkStatus();
}

}  // namespace kvindex::agent
