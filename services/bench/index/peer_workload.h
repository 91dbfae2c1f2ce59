// The peer workload (docs/benchmarks.md, "Peer workload"), implemented
// exactly: synthetic hashes over the Mooncake conversation trace, 64 simulated
// engines with leaf-first LRU, one query + removed + stored event per request.
// Its published checksums prove the stream is the one NVIDIA Dynamo's index
// was measured on, so the figures are comparable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/base/status.h"
#include "shared/index/index_interface.h"
#include "shared/model/placement_event.h"
#include "shared/trace/mooncake_trace.h"

namespace kvindex::bench {

inline constexpr char kPeerModel[] = "peer";

// The workload's hash functions (docs/benchmarks.md, "Peer workload").
uint64_t PeerMix64(uint64_t z);
uint64_t PeerLocal(uint64_t copy, uint64_t hash_id, uint64_t block);
uint64_t PeerChain(uint64_t parent, uint64_t local);
inline constexpr uint64_t kPeerSeqRoot = 0x2545F4914F6CDD1Dull;

struct PeerConfig {
  uint32_t copies = 4;         // D
  uint32_t workers = 64;       // W
  uint64_t capacity = 156250;  // C, blocks per worker
  size_t max_requests = 0;     // trace lines used; 0 = all
  // The published checksums apply only to the full default configuration.
  bool IsReference() const {
    return copies == 4 && workers == 64 && capacity == 156250 && max_requests == 0;
  }
};

struct PeerRequest {
  std::vector<uint64_t> query;  // first min(n, 128) sequence hashes
  PlacementEvent removed;       // empty block_hashes = no event
  PlacementEvent stored;        // empty block_hashes = no event
};

struct PeerStream {
  std::vector<PeerRequest> requests;
  uint64_t stored_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t events = 0;
  uint64_t final_entries = 0;  // simulated (worker, block) entries at the end
  uint64_t query_blocks = 0;
};

PeerStream GeneratePeerStream(const std::vector<trace::TraceRequest>& trace,
                              const PeerConfig& config);
// The same stream one request at a time, none of it kept: `on_request` gets
// each request in order (it may move from it); *totals gets the counts
// (its requests stay empty). For states too large to hold the stream
// beside the index (kvindex-bench restart --checkpoint-only).
void GeneratePeerRequests(const std::vector<trace::TraceRequest>& trace, const PeerConfig& config,
                          const std::function<void(size_t index, PeerRequest& request)>& on_request,
                          PeerStream* totals);

struct PeerRun {
  uint64_t block_ops = 0;
  double apply_seconds = 0;
  std::vector<uint32_t> interleaved_ns;  // per query, before its own events
  std::vector<uint32_t> final_warm_ns;   // every query again on the final state
  uint64_t depth_interleaved = 0;        // sum over queries of per-worker longest
  uint64_t depth_final = 0;
  index::IndexStats stats;  // at the end
};

// Called after request `request`'s events were applied, outside the timed
// span, with the nanoseconds they took (kvindex-bench index --profile).
using PeerHook = std::function<void(size_t request, uint64_t apply_ns)>;

// Single thread: query (timed), removed event, stored event (apply timed).
PeerRun RunPeer(index::IndexInterface& index, const PeerStream& stream,
                const PeerHook& after_apply = {});

// The published checks (docs/benchmarks.md, "Peer workload"), which
// `kvindex-bench index` reports (checksums_ok, exit 1 on a mismatch). The
// tests do not use this list: peer_checks_test.cc writes the published
// values itself. Each line is "name ok" or "name got X want Y".
struct PeerCheck {
  std::string name;
  uint64_t got = 0, want = 0;
  bool ok() const { return got == want; }
};
std::vector<PeerCheck> PeerChecks(const PeerStream& stream, const PeerRun& run);

}  // namespace kvindex::bench
