// Placement events for tests (the index's and the apply loop's): one place
// that knows which fields each kind carries.
//
//   index.Apply(Stored("w0", Tier::kDevice, {1, 2, 3}), ++seq);
//   index.Apply(Cleared("w0", /*dp_rank=*/0, /*model=*/""), ++seq);  // every model
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shared/model/placement_event.h"

namespace kvindex::index::testing {

// `hashes` stored by (worker, dp_rank) in `tier` of `model`.
inline PlacementEvent Stored(std::string worker, Tier tier, std::vector<uint64_t> hashes,
                             uint32_t dp_rank = 0, std::string model = "m",
                             uint32_t block_size = 4) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = std::move(model);
  e.source = {std::move(worker), dp_rank};
  e.tier = tier;
  e.block_size = block_size;
  e.block_hashes = std::move(hashes);
  return e;
}

inline PlacementEvent Removed(std::string worker, Tier tier, std::vector<uint64_t> hashes,
                              uint32_t dp_rank = 0, std::string model = "m") {
  PlacementEvent e = Stored(std::move(worker), tier, std::move(hashes), dp_rank, std::move(model));
  e.kind = PlacementKind::kRemoved;
  return e;
}

// Every entry of (worker, dp_rank) in `model` ("": in every model).
inline PlacementEvent Cleared(std::string worker, uint32_t dp_rank = 0, std::string model = "m") {
  PlacementEvent e;
  e.kind = PlacementKind::kCleared;
  e.model = std::move(model);
  e.source = {std::move(worker), dp_rank};
  return e;
}

// Every entry of every rank of `worker`, in every model.
inline PlacementEvent Expired(std::string worker) {
  PlacementEvent e;
  e.kind = PlacementKind::kWorkerExpired;
  e.source = {std::move(worker), 0};
  return e;
}

// `e` as agent `agent` publishes it at `timestamp_ns`.
inline PlacementEvent Stamped(std::string agent, uint64_t timestamp_ns, PlacementEvent e) {
  e.agent = std::move(agent);
  e.timestamp_ns = timestamp_ns;
  return e;
}

}  // namespace kvindex::index::testing
