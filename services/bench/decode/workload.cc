#include "services/bench/decode/workload.h"

#include <algorithm>
#include <deque>
#include <random>

#include "shared/wire/event_encoder.h"

namespace kvindex::bench {
namespace {

using wire::EventType;
using wire::WireEvent;

struct Request {
  std::vector<uint64_t> hashes;  // engine hashes, chain order
  std::vector<uint32_t> tokens;  // block_size per block
  std::optional<uint64_t> parent;
  bool offloaded = false;
};

class Generator {
 public:
  explicit Generator(const WorkloadOptions& options)
      : o_(options), rng_(options.seed), next_hash_(0x9e3779b97f4a7c15ull ^ options.seed) {}

  Workload Run() {
    Workload w;
    std::vector<WireEvent> pending;
    while (w.payloads.size() < o_.batches) {
      if (queue_.empty()) Produce();
      pending.clear();
      const uint32_t n = 1 + static_cast<uint32_t>(rng_() % o_.max_events_per_batch);
      while (pending.size() < n && !queue_.empty()) {
        pending.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      for (const WireEvent& e : pending) {
        ++w.events;
        w.blocks += e.block_hashes.size();
        if (e.type == EventType::kBlockStored) w.stored_blocks += e.block_hashes.size();
      }
      std::vector<uint8_t> payload;
      wire::EncodeBatch(1757500000.25 + static_cast<double>(w.payloads.size()) * 0.001, pending, 0u,
                        {}, &payload);
      w.bytes += payload.size();
      w.expected_blocks = std::max<uint32_t>(w.expected_blocks, static_cast<uint32_t>(held_));
      w.payloads.push_back(std::move(payload));
    }
    return w;
  }

 private:
  uint64_t NextHash() {
    // splitmix64: engine hashes look random and span all 64 bits (cf encoding).
    uint64_t z = (next_hash_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // Serves one request: GPU stores, maybe CPU offload, evictions.
  void Produce() {
    Request r;
    const uint32_t blocks = 1 + static_cast<uint32_t>(rng_() % 64);
    if (!live_.empty() && rng_() % 2 == 0) {
      // Branch off a live request's prefix (parent known on GPU).
      const Request& base = live_[rng_() % live_.size()];
      r.parent = base.hashes[rng_() % base.hashes.size()];
    }
    r.hashes.resize(blocks);
    for (uint64_t& h : r.hashes) h = NextHash();
    r.tokens.resize(size_t{blocks} * o_.block_size);
    for (uint32_t& t : r.tokens) t = static_cast<uint32_t>(rng_() % 151936);  // vocab-sized ids

    // GPU stores in pieces of 1-32 blocks.
    for (uint32_t first = 0; first < blocks;) {
      const uint32_t count = std::min<uint32_t>(blocks - first, 1 + rng_() % 32);
      queue_.push_back(Stored(r, first, count, "GPU"));
      first += count;
    }
    if (o_.cpu_offload && rng_() % 4 == 0) {
      r.offloaded = true;
      for (uint32_t first = 0; first < blocks; first += 4) {
        queue_.push_back(Stored(r, first, std::min<uint32_t>(blocks - first, 8), "CPU"));
        if (first + 8 >= blocks) break;
      }
    }
    gpu_blocks_ += blocks;
    held_ = std::max(held_, gpu_blocks_);
    live_.push_back(std::move(r));
    while (o_.removals && gpu_blocks_ > o_.gpu_capacity_blocks && live_.size() > 1) Evict();
  }

  WireEvent Stored(const Request& r, uint32_t first, uint32_t count, const char* medium) {
    WireEvent e;
    e.type = EventType::kBlockStored;
    e.block_hashes.assign(r.hashes.begin() + first, r.hashes.begin() + first + count);
    e.parent_block_hash = first == 0 ? r.parent : std::optional<uint64_t>(r.hashes[first - 1]);
    e.token_ids.assign(r.tokens.begin() + size_t{first} * o_.block_size,
                       r.tokens.begin() + size_t{first + count} * o_.block_size);
    e.block_size = o_.block_size;
    e.medium = medium;
    return e;
  }

  void Evict() {
    Request r = std::move(live_.front());
    live_.pop_front();
    gpu_blocks_ -= r.hashes.size();
    WireEvent gpu;
    gpu.type = EventType::kBlockRemoved;
    gpu.block_hashes.assign(r.hashes.rbegin(), r.hashes.rend());  // leaf first
    gpu.medium = "GPU";
    queue_.push_back(std::move(gpu));
    if (r.offloaded) {
      // One removal per offloaded chunk copy (overlapping blocks twice).
      const uint32_t blocks = static_cast<uint32_t>(r.hashes.size());
      for (uint32_t first = 0; first < blocks; first += 4) {
        const uint32_t count = std::min<uint32_t>(blocks - first, 8);
        WireEvent cpu;
        cpu.type = EventType::kBlockRemoved;
        cpu.block_hashes.assign(r.hashes.begin() + first, r.hashes.begin() + first + count);
        cpu.medium = "CPU";
        queue_.push_back(std::move(cpu));
        if (first + 8 >= blocks) break;
      }
    }
  }

  const WorkloadOptions o_;
  std::mt19937_64 rng_;
  uint64_t next_hash_;
  std::deque<Request> live_;
  std::deque<WireEvent> queue_;
  uint64_t gpu_blocks_ = 0;
  // Distinct engine blocks held (CPU copies share the GPU blocks' hashes).
  uint64_t held_ = 0;
};

}  // namespace

Workload GenerateWorkload(const WorkloadOptions& options) { return Generator(options).Run(); }

}  // namespace kvindex::bench
