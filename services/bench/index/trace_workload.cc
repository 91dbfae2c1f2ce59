#include "services/bench/index/trace_workload.h"

#include <deque>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "services/bench/index/peer_workload.h"
#include "shared/hashing/canonical_hash.h"

namespace kvindex::bench {
namespace {

constexpr uint32_t kBlockSize = 16;
constexpr uint64_t kBlocksPerId = 32;
constexpr size_t kQueryBlocks = 128;

struct Group {
  uint64_t g = 0;
  std::vector<uint64_t> blocks;  // deepest first
  size_t next = 0;
};

// A lower tier: FIFO by arrival (offloaded blocks are not refreshed).
struct FifoTier {
  absl::flat_hash_set<uint64_t> members;
  std::deque<uint64_t> order;
};

struct Worker {
  absl::flat_hash_map<uint64_t, uint64_t> device;  // seq hash -> request number
  std::deque<Group> lru;
  FifoTier lower[3];  // host, disk, external
};

// Synthetic token content of block i of hash id h in copy d: deterministic,
// disjoint across copies.
uint64_t LocalHash(uint64_t copy, uint64_t hash_id, uint64_t block) {
  uint32_t tokens[kBlockSize];
  uint64_t state = PeerLocal(copy, hash_id, block);
  for (uint32_t& t : tokens) {
    state = PeerMix64(state + 0x9E3779B97F4A7C15ull);
    t = static_cast<uint32_t>(state % 128000);
  }
  return hashing::LocalBlockHash(tokens, hashing::kRootSeed);
}

class Simulator {
 public:
  Simulator(const TraceConfig& config) : config_(config), workers_(config.workers) {}

  SimRequest Process(const trace::TraceRequest& request, uint64_t copy, uint64_t g,
                     uint64_t* block_ops) {
    Worker& w = workers_[g % config_.workers];
    const SourceKey source{"worker-" + std::to_string(g % config_.workers), 0};
    seq_.clear();
    local_.clear();
    for (uint64_t h : request.hash_ids) {
      for (uint64_t i = 0; i < kBlocksPerId; ++i) local_.push_back(LocalHash(copy, h, i));
    }
    hashing::ComputeSequenceHashes(local_, std::nullopt, &seq_);
    const size_t n = seq_.size();
    size_t p = 0;
    while (p < n && w.device.contains(seq_[p])) ++p;
    for (size_t k = 0; k < p; ++k) w.device[seq_[k]] = g;

    // Batches per tier; within a tier, removed and stored sets are disjoint
    // (victims are old members, newcomers are not members), so event order
    // inside a request does not matter.
    std::vector<uint64_t> removed[4], stored[4];
    while (w.device.size() + (n - p) > config_.capacity[0] && !w.lru.empty()) {
      Group& oldest = w.lru.front();
      if (oldest.next == oldest.blocks.size()) {
        w.lru.pop_front();
        continue;
      }
      const uint64_t b = oldest.blocks[oldest.next++];
      auto it = w.device.find(b);
      if (it == w.device.end() || it->second != oldest.g) continue;
      w.device.erase(it);
      removed[0].push_back(b);
    }
    // Offload cascade: device -> host -> disk -> external -> dropped.
    std::vector<uint64_t> incoming = removed[0];
    for (int t = 1; t < 4; ++t) {
      FifoTier& tier = w.lower[t - 1];
      std::vector<uint64_t> fresh;
      for (uint64_t b : incoming) {
        if (!tier.members.contains(b)) fresh.push_back(b);
      }
      while (tier.members.size() + fresh.size() > config_.capacity[t] && !tier.order.empty()) {
        const uint64_t victim = tier.order.front();
        tier.order.pop_front();
        tier.members.erase(victim);
        removed[t].push_back(victim);
      }
      for (uint64_t b : fresh) {
        tier.members.insert(b);
        tier.order.push_back(b);
        stored[t].push_back(b);
      }
      incoming = removed[t];
    }
    for (size_t k = p; k < n; ++k) {
      w.device[seq_[k]] = g;
      stored[0].push_back(seq_[k]);
    }
    Group group;
    group.g = g;
    group.blocks.assign(seq_.rbegin(), seq_.rend());
    w.lru.push_back(std::move(group));

    SimRequest out;
    auto emit = [&](PlacementKind kind, int t, std::vector<uint64_t>& hashes) {
      if (hashes.empty()) return;
      PlacementEvent e;
      e.kind = kind;
      e.model = kTraceModel;
      e.source = source;
      e.tier = static_cast<Tier>(t);
      e.block_size = kBlockSize;
      *block_ops += hashes.size();
      e.block_hashes = std::move(hashes);
      out.events.push_back(std::move(e));
    };
    // An offload completes (stored in the lower tier) before the upper tier
    // frees the block, as engines report it: a moving block is never absent.
    for (int t = 3; t >= 1; --t) {
      emit(PlacementKind::kStored, t, stored[t]);
      emit(PlacementKind::kRemoved, t, removed[t]);
    }
    emit(PlacementKind::kRemoved, 0, removed[0]);
    emit(PlacementKind::kStored, 0, stored[0]);
    out.query.assign(seq_.begin(), seq_.begin() + std::min(n, kQueryBlocks));
    while (out.query.size() < kQueryBlocks) out.query.push_back(rng_() | 1);
    return out;
  }

  uint64_t Entries(uint64_t* per_tier) const {
    uint64_t total = 0;
    for (const Worker& w : workers_) {
      per_tier[0] += w.device.size();
      for (int t = 1; t < 4; ++t) per_tier[t] += w.lower[t - 1].members.size();
    }
    for (int t = 0; t < 4; ++t) total += per_tier[t];
    return total;
  }

 private:
  const TraceConfig& config_;
  std::vector<Worker> workers_;
  std::vector<uint64_t> seq_, local_;
  std::mt19937_64 rng_{7};
};

}  // namespace

TraceStream GenerateTraceStream(const std::vector<trace::TraceRequest>& trace,
                                const TraceConfig& config) {
  TraceStream stream;
  Simulator sim(config);
  uint64_t g = 0;
  for (uint32_t copy = 0; copy < config.max_copies; ++copy) {
    const bool churn = stream.copies > 0 && stream.entries_after_fill >= config.min_entries;
    std::vector<SimRequest>& out = churn ? stream.churn : stream.fill;
    uint64_t* ops = churn ? &stream.churn_block_ops : &stream.fill_block_ops;
    for (const trace::TraceRequest& r : trace) out.push_back(sim.Process(r, copy, g++, ops));
    uint64_t per_tier[4] = {};
    const uint64_t entries = sim.Entries(per_tier);
    if (churn) {
      stream.entries_after_churn = entries;
      for (int t = 0; t < 4; ++t) stream.entries_per_tier[t] = per_tier[t];
      break;
    }
    stream.copies = copy + 1;
    stream.entries_after_fill = entries;
  }
  return stream;
}

}  // namespace kvindex::bench
