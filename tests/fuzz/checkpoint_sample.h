// A small but complete checkpoint image for the storage fuzz targets' seed
// corpora: two models, three sources, every tier, an agent with a lease,
// an ingest state and a stream identity, captured from a real index.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/consume/agent_table.h"
#include "shared/index/kv_index.h"
#include "storage/checkpoint_image.h"

namespace kvindex::fuzz {

inline storage::CheckpointImage SampleCheckpoint() {
  index::KvIndex index;
  consume::AgentTable agents;
  std::vector<PlacementEvent> clears;
  const auto now = std::chrono::steady_clock::now();
  uint64_t position = 0;
  PlacementEvent heartbeat;
  heartbeat.kind = PlacementKind::kHeartbeat;
  heartbeat.agent = "node-a";
  heartbeat.lease_ms = 10000;
  heartbeat.sources = {{"w0", 0}, {"w1", 1}};
  agents.Observe(heartbeat, ++position, now, &clears);
  for (int i = 0; i < 6; ++i) {
    PlacementEvent e;
    e.kind = PlacementKind::kStored;
    e.model = i % 2 == 0 ? "m" : "llama";
    e.source = {i < 4 ? "w" + std::to_string(i % 2) : "w2", static_cast<uint32_t>(i % 2)};
    e.agent = "node-a";
    e.tier = static_cast<Tier>(i % kNumTiers);
    e.block_size = i % 2 == 0 ? 4 : 16;
    for (uint64_t h = 0; h < 3 + static_cast<uint64_t>(i); ++h) {
      e.block_hashes.push_back(0x9e3779b97f4a7c15ULL * (h + 1) + static_cast<uint64_t>(i));
    }
    ++position;
    agents.Observe(e, position, now, &clears);
    index.Apply(e, position);
  }
  storage::CheckpointImage image = storage::CaptureCheckpoint(index, &agents);
  image.ingest.push_back({"zmq://127.0.0.1:5557?model=m", std::string("state\0bytes", 11)});
  image.stream = "KVINDEX";
  image.stream_created_ns = 1764000000000000000;
  return image;
}

}  // namespace kvindex::fuzz
