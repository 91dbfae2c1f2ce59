// Steady-state allocation check for SourceProcessor: once its maps and
// scratch vectors have grown, decoding and normalizing a batch allocates
// only the placement events' own hash vectors (one per placement), never
// per block. Replaces the global operator new of this test binary to count.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "shared/normalize/source_processor.h"
#include "shared/wire/event_encoder.h"

// The replacements below pair malloc with free by construction; GCC's
// inliner cannot see that through std::allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<bool> counting{false};
std::atomic<uint64_t> allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace kvindex::normalize {
namespace {

using wire::EventType;
using wire::WireEvent;

// One cycle: 64 chains of 1..32 blocks stored on GPU (chained in pieces),
// re-announced as CPU chunks, then everything removed from both tiers.
std::vector<std::vector<uint8_t>> Cycle() {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<WireEvent> removals;
  for (uint32_t chain = 0; chain < 64; ++chain) {
    const uint32_t blocks = 1 + chain % 32;
    std::vector<uint64_t> hashes;
    std::vector<uint32_t> tokens;
    for (uint32_t b = 0; b < blocks; ++b) {
      hashes.push_back((uint64_t{chain} << 32) | (b + 1));
      for (uint32_t t = 0; t < 16; ++t) tokens.push_back(chain * 100000 + b * 16 + t);
    }
    WireEvent gpu;
    gpu.type = EventType::kBlockStored;
    gpu.block_hashes = hashes;
    gpu.token_ids = tokens;
    gpu.block_size = 16;
    gpu.medium = "GPU";
    WireEvent cpu = gpu;
    cpu.medium = "CPU";
    std::vector<uint8_t> payload;
    const std::vector<WireEvent> events = {gpu, cpu, gpu};  // gpu twice: a re-announcement
    wire::EncodeBatch(1, events, 0u, {}, &payload);
    payloads.push_back(std::move(payload));
    WireEvent removed;
    removed.type = EventType::kBlockRemoved;
    removed.block_hashes = hashes;
    removed.medium = "GPU";
    removals.push_back(removed);
    removals.push_back(removed);
    removed.medium = "CPU";
    removals.push_back(removed);
  }
  std::vector<uint8_t> payload;
  wire::EncodeBatch(2, removals, 0u, {}, &payload);
  payloads.push_back(std::move(payload));
  return payloads;
}

TEST(SourceProcessorAllocTest, SteadyStateAllocatesOnlyPerPlacement) {
  SourceOptions options;
  options.worker = "w0";
  options.model = "m";
  SourceStats stats;
  SourceProcessor processor(options, &stats);
  const std::vector<std::vector<uint8_t>> cycle = Cycle();
  std::vector<PlacementEvent> out;
  out.reserve(1024);
  for (int warm = 0; warm < 2; ++warm) {
    for (const auto& payload : cycle) ASSERT_TRUE(processor.ProcessPayload(payload, &out).ok());
    out.clear();
  }
  const uint64_t blocks_before =
      stats.blocks_received[kBlocksStored].load() + stats.blocks_received[kBlocksRemoved].load();
  allocations = 0;
  counting = true;
  for (const auto& payload : cycle) {
    (void)processor.ProcessPayload(payload, &out);
  }
  counting = false;
  const uint64_t blocks = stats.blocks_received[kBlocksStored].load() +
                          stats.blocks_received[kBlocksRemoved].load() - blocks_before;
  // One vector per stored/removed placement (the events' strings fit SSO).
  EXPECT_EQ(allocations.load(), out.size());
  EXPECT_GT(blocks, 20u * out.size());
  EXPECT_EQ(processor.tracked_blocks(), 0u);
}

}  // namespace
}  // namespace kvindex::normalize
