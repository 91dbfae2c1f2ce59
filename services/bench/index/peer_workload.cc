#include "services/bench/index/peer_workload.h"

#include <bit>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "services/bench/index/latency.h"

namespace kvindex::bench {
namespace {

// One request's blocks in eviction order (deepest first). A block is live in
// the group only while the cache maps it to this group's request number:
// refreshing a block moves it to a newer group and leaves a stale copy here.
struct Group {
  uint64_t g = 0;
  std::vector<uint64_t> blocks;
  size_t next = 0;
};

struct WorkerCache {
  absl::flat_hash_map<uint64_t, uint64_t> stamp;  // seq hash -> request number g
  std::deque<Group> lru;                          // oldest group first
};

}  // namespace

uint64_t PeerMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t PeerLocal(uint64_t copy, uint64_t hash_id, uint64_t block) {
  return PeerMix64(PeerMix64((copy << 32) ^ hash_id ^ 0x9E3779B97F4A7C15ull) +
                   (block + 1) * 0xD1B54A32D192ED03ull);
}

uint64_t PeerChain(uint64_t parent, uint64_t local) {
  return PeerMix64(std::rotl(parent, 23) ^ local);
}

PeerStream GeneratePeerStream(const std::vector<trace::TraceRequest>& trace,
                              const PeerConfig& config) {
  PeerStream stream;
  stream.requests.reserve(trace.size() * config.copies);
  GeneratePeerRequests(
      trace, config,
      [&](size_t, PeerRequest& request) { stream.requests.push_back(std::move(request)); },
      &stream);
  return stream;
}

void GeneratePeerRequests(const std::vector<trace::TraceRequest>& trace, const PeerConfig& config,
                          const std::function<void(size_t index, PeerRequest& request)>& on_request,
                          PeerStream* totals) {
  constexpr uint64_t kBlocksPerId = 32;
  constexpr size_t kQueryBlocks = 128;
  PeerStream& stream = *totals;
  std::vector<WorkerCache> caches(config.workers);
  std::vector<uint64_t> seq;
  size_t index = 0;
  for (size_t j = 0; j < trace.size(); ++j) {
    for (uint64_t d = 0; d < config.copies; ++d) {
      const uint64_t g = j * config.copies + d;
      const uint32_t w = static_cast<uint32_t>(g % config.workers);
      WorkerCache& cache = caches[w];
      seq.clear();
      uint64_t parent = kPeerSeqRoot;
      for (uint64_t h : trace[j].hash_ids) {
        for (uint64_t i = 0; i < kBlocksPerId; ++i) {
          parent = PeerChain(parent, PeerLocal(d, h, i));
          seq.push_back(parent);
        }
      }
      const size_t n = seq.size();
      size_t p = 0;
      while (p < n && cache.stamp.contains(seq[p])) ++p;
      for (size_t k = 0; k < p; ++k) cache.stamp[seq[k]] = g;

      PeerRequest req;
      const SourceKey source{"worker-" + std::to_string(w), 0};
      req.removed.kind = PlacementKind::kRemoved;
      req.removed.model = kPeerModel;
      req.removed.source = source;
      req.stored.kind = PlacementKind::kStored;
      req.stored.model = kPeerModel;
      req.stored.source = source;
      req.stored.block_size = 16;
      // Evict the smallest stamps: oldest request first, deepest block first.
      while (cache.stamp.size() + (n - p) > config.capacity && !cache.lru.empty()) {
        Group& oldest = cache.lru.front();
        if (oldest.next == oldest.blocks.size()) {
          cache.lru.pop_front();
          continue;
        }
        const uint64_t b = oldest.blocks[oldest.next++];
        auto it = cache.stamp.find(b);
        if (it == cache.stamp.end() || it->second != oldest.g) continue;  // stale copy
        cache.stamp.erase(it);
        req.removed.block_hashes.push_back(b);
      }
      // Only when one request alone exceeds the capacity: its refreshed
      // prefix goes too, deepest first (never happens at the default C).
      for (size_t k = p; k-- > 0 && cache.stamp.size() + (n - p) > config.capacity;) {
        cache.stamp.erase(seq[k]);
        req.removed.block_hashes.push_back(seq[k]);
      }
      if (p > 0) req.stored.parent_hash = seq[p - 1];
      for (size_t k = p; k < n; ++k) {
        cache.stamp[seq[k]] = g;
        req.stored.block_hashes.push_back(seq[k]);
      }
      Group group;
      group.g = g;
      group.blocks.assign(seq.rbegin(), seq.rend());
      cache.lru.push_back(std::move(group));

      req.query.assign(seq.begin(), seq.begin() + std::min(n, kQueryBlocks));
      stream.query_blocks += req.query.size();
      stream.stored_blocks += req.stored.block_hashes.size();
      stream.removed_blocks += req.removed.block_hashes.size();
      stream.events += !req.stored.block_hashes.empty();
      stream.events += !req.removed.block_hashes.empty();
      on_request(index++, req);
    }
  }
  for (const WorkerCache& c : caches) stream.final_entries += c.stamp.size();
}

namespace {

uint64_t DepthOf(const StatusOr<index::MatchResult>& r) {
  uint64_t depth = 0;
  if (r.ok()) {
    for (const index::WorkerMatch& w : r->workers) depth += w.longest;
  }
  return depth;
}

}  // namespace

PeerRun RunPeer(index::IndexInterface& index, const PeerStream& stream,
                const PeerHook& after_apply) {
  PeerRun run;
  run.interleaved_ns.reserve(stream.requests.size());
  uint64_t position = 0;
  uint64_t apply_ns = 0;
  for (size_t r = 0; r < stream.requests.size(); ++r) {
    const PeerRequest& req = stream.requests[r];
    uint32_t ns = 0;
    run.depth_interleaved += DepthOf(TimedMatch(index, kPeerModel, req.query, &ns));
    run.interleaved_ns.push_back(ns);
    const uint64_t t2 = NowNs();
    if (!req.removed.block_hashes.empty()) index.Apply(req.removed, ++position);
    if (!req.stored.block_hashes.empty()) index.Apply(req.stored, ++position);
    const uint64_t took = NowNs() - t2;
    apply_ns += took;
    run.block_ops += req.removed.block_hashes.size() + req.stored.block_hashes.size();
    if (after_apply) after_apply(r, took);
  }
  run.apply_seconds = static_cast<double>(apply_ns) * 1e-9;
  // Final state: one pass to warm, one timed.
  for (int pass = 0; pass < 2; ++pass) {
    run.depth_final = 0;
    run.final_warm_ns.clear();
    for (const PeerRequest& req : stream.requests) {
      uint32_t ns = 0;
      run.depth_final += DepthOf(TimedMatch(index, kPeerModel, req.query, &ns));
      run.final_warm_ns.push_back(ns);
    }
  }
  run.stats = index.Stats();
  return run;
}

std::vector<PeerCheck> PeerChecks(const PeerStream& stream, const PeerRun& run) {
  uint64_t entries = 0;
  for (uint64_t e : run.stats.entries) entries += e;
  return {
      {"requests", stream.requests.size(), 48124},
      {"stored_blocks", stream.stored_blocks, 33545088},
      {"removed_blocks", stream.removed_blocks, 23545088},
      {"block_ops", stream.stored_blocks + stream.removed_blocks, 57090176},
      {"events", stream.events, 83676},
      {"final_entries_simulated", stream.final_entries, 10000000},
      {"final_entries_index", entries, 10000000},
      // mean query length 118.4 blocks: the exact total behind it.
      {"mean_query_blocks_x10",
       (stream.query_blocks * 10 + stream.requests.size() / 2) / stream.requests.size(), 1184},
      {"depth_sum_interleaved", run.depth_interleaved, 27982544},
      {"depth_sum_final", run.depth_final, 28240216},
  };
}

}  // namespace kvindex::bench
