// BlockLocator against a plain map: stores, erases and relabels on a small
// table crowded into a few home buckets (long full runs, wrap-around, equal
// tags), the shape erasing leaves, and readers racing a writer that
// relabels, fills and erases.
#include "shared/index/internal/block_locator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace kvindex::index::internal {
namespace {

using Position = std::pair<uint32_t, uint32_t>;  // (node reference, offset)

// The "nodes": which hash sits at each position, as ChainNodes would say.
struct Positions {
  std::map<Position, uint64_t> at;
  bool Holds(uint32_t ref, uint32_t offset, uint64_t hash) const {
    auto it = at.find({ref, offset});
    return it != at.end() && it->second == hash;
  }
};

// Hashes whose home bucket is one of `homes`, optionally all with the same
// low byte (so every tag is equal and every slot needs the node's word).
std::vector<uint64_t> CrowdedHashes(const BlockLocator& loc, const std::vector<size_t>& homes,
                                    size_t count, bool equal_tags, std::mt19937_64* rng) {
  std::vector<uint64_t> out;
  while (out.size() < count) {
    uint64_t h = (*rng)();
    if (equal_tags) h = (h & ~uint64_t{0xFF}) | 0x5A;
    for (size_t home : homes) {
      if (loc.HomeBucket(h) == home) {
        out.push_back(h);
        break;
      }
    }
  }
  return out;
}

void RunAgainstMap(bool equal_tags, uint64_t seed) {
  MemoryCounter memory;
  std::unique_ptr<BlockLocator> loc = BlockLocator::Create(600, &memory);
  ASSERT_NE(loc, nullptr);
  const size_t buckets = loc->capacity() / BlockLocator::kBucketSlots;
  ASSERT_GE(buckets, 8u);
  std::mt19937_64 rng(seed);
  // Three crowded neighbourhoods, one of them across the wrap-around.
  const std::vector<uint64_t> pool =
      CrowdedHashes(*loc, {0, 1, buckets / 2, buckets - 1}, 400, equal_tags, &rng);
  std::map<uint64_t, Position> truth;
  Positions nodes;
  uint32_t next_ref = 1;
  auto is_block_for = [&](uint64_t h) {
    return [&nodes, h](uint32_t ref, uint32_t off) { return nodes.Holds(ref, off, h); };
  };
  auto check_all = [&](int step) {
    ASSERT_EQ(loc->used(), truth.size()) << "step " << step;
    for (uint64_t h : pool) {
      uint64_t value = 0;
      const size_t i = loc->Find(h, is_block_for(h), &value);
      auto it = truth.find(h);
      if (it == truth.end()) {
        ASSERT_EQ(i, BlockLocator::kNotFound) << "step " << step << " hash " << h;
      } else {
        ASSERT_NE(i, BlockLocator::kNotFound) << "step " << step << " hash " << h;
        ASSERT_EQ(BlockLocator::NodeRef(value), it->second.first);
        ASSERT_EQ(BlockLocator::Offset(value), it->second.second);
      }
    }
  };
  for (int step = 0; step < 3000; ++step) {
    const uint64_t h = pool[rng() % pool.size()];
    auto it = truth.find(h);
    const int op = static_cast<int>(rng() % 3);
    if (it == truth.end()) {
      if (loc->Room() == 0) continue;
      uint64_t value = 1;
      const size_t i = loc->Probe(h, is_block_for(h), &value);
      ASSERT_NE(i, BlockLocator::kNotFound);
      ASSERT_EQ(value, 0u);
      const Position p{next_ref++ & 0xFFFFFFF, static_cast<uint32_t>(rng() % 4096)};
      nodes.at[p] = h;
      loc->Fill(i, h, p.first, p.second);
      truth[h] = p;
    } else {
      uint64_t value = 0;
      const size_t i = loc->Find(h, is_block_for(h), &value);
      ASSERT_NE(i, BlockLocator::kNotFound);
      if (op == 0) {
        const Position p{next_ref++ & 0xFFFFFFF, static_cast<uint32_t>(rng() % 4096)};
        nodes.at[p] = h;
        loc->Relabel(i, p.first, p.second);
        nodes.at.erase(it->second);
        it->second = p;
      } else {
        loc->Erase(i);
        nodes.at.erase(it->second);
        truth.erase(it);
      }
    }
    if (step % 50 == 0) {
      ASSERT_NO_FATAL_FAILURE(check_all(step));
    }
  }
  ASSERT_NO_FATAL_FAILURE(check_all(-1));
  // Erasing keeps the table as if built afresh: which buckets are full (so
  // how far every miss reads) does not depend on the order of inserts in
  // linear probing, so it equals a fresh table's with the same blocks.
  std::unique_ptr<BlockLocator> fresh = BlockLocator::Create(600, &memory);
  for (const auto& [h, p] : truth) ASSERT_TRUE(fresh->Insert(h, p.first, p.second));
  std::vector<uint64_t> churned_d, churned_lines, fresh_d, fresh_lines;
  loc->Histograms(&churned_d, &churned_lines);
  fresh->Histograms(&fresh_d, &fresh_lines);
  EXPECT_EQ(churned_lines, fresh_lines);
  uint64_t churned_sum = 0, fresh_sum = 0;
  for (size_t d = 0; d < churned_d.size(); ++d) {
    churned_sum += d * churned_d[d];
    fresh_sum += d * fresh_d[d];
  }
  EXPECT_EQ(churned_sum, fresh_sum);  // total displacement: order-independent too
  // Empty again: every bucket has room (a miss reads one line).
  for (const auto& [h, p] : truth) {
    uint64_t value = 0;
    loc->Erase(loc->Find(h, is_block_for(h), &value));
  }
  std::vector<uint64_t> displacement, lines;
  loc->Histograms(&displacement, &lines);
  EXPECT_EQ(lines[1], buckets);
  EXPECT_EQ(loc->used(), 0u);
}

TEST(BlockLocatorTest, MatchesAMapWithLongRuns) { RunAgainstMap(false, 1); }
TEST(BlockLocatorTest, MatchesAMapWhenEveryTagIsEqual) { RunAgainstMap(true, 2); }

// The rebuild path fills a table no reader sees; lookups then find every
// block at its position, and the histograms count each block once.
TEST(BlockLocatorTest, InsertThenFindAtFullLoad) {
  MemoryCounter memory;
  std::unique_ptr<BlockLocator> loc = BlockLocator::Create(100000, &memory);
  ASSERT_NE(loc, nullptr);
  std::mt19937_64 rng(3);
  Positions nodes;
  std::vector<uint64_t> hashes;
  while (loc->Room() > 0) {
    const uint64_t h = rng();
    const Position p{static_cast<uint32_t>(hashes.size() / 4096 + 1),
                     static_cast<uint32_t>(hashes.size() % 4096)};
    ASSERT_TRUE(loc->Insert(h, p.first, p.second));
    nodes.at[p] = h;
    hashes.push_back(h);
  }
  EXPECT_GE(static_cast<double>(loc->used()) / static_cast<double>(loc->capacity()), 0.84);
  for (size_t x = 0; x < hashes.size(); ++x) {
    uint64_t value = 0;
    const uint64_t h = hashes[x];
    ASSERT_NE(loc->Find(
                  h, [&](uint32_t r, uint32_t o) { return nodes.Holds(r, o, h); }, &value),
              BlockLocator::kNotFound);
    EXPECT_EQ(BlockLocator::NodeRef(value), x / 4096 + 1);
    EXPECT_EQ(BlockLocator::Offset(value), x % 4096);
  }
  std::vector<uint64_t> displacement, lines;
  loc->Histograms(&displacement, &lines);
  uint64_t total = 0;
  for (uint64_t d : displacement) total += d;
  EXPECT_EQ(total, hashes.size());
  // Most blocks sit in their home bucket even at 85% load.
  EXPECT_GT(displacement[0] * 10, total * 8);
}

// Readers never see a torn slot or miss a block that stays in the table,
// while the writer relabels those blocks back and forth and fills and erases
// others in the same buckets.
TEST(BlockLocatorTest, ReadersRacingTheWriter) {
  MemoryCounter memory;
  std::unique_ptr<BlockLocator> loc = BlockLocator::Create(600, &memory);
  ASSERT_NE(loc, nullptr);
  std::mt19937_64 rng(4);
  const std::vector<uint64_t> stay = CrowdedHashes(*loc, {0, 1, 2}, 20, false, &rng);
  const std::vector<uint64_t> churn = CrowdedHashes(*loc, {0, 1, 2}, 20, false, &rng);
  // Each staying block alternates between positions (x + 1, x) and
  // (x + 1 + 0x100000, 4095 - x); both always "hold" it.
  auto holds_stay = [&](uint64_t h, uint32_t ref, uint32_t off) {
    for (uint32_t x = 0; x < stay.size(); ++x) {
      if (stay[x] != h) continue;
      return (ref == x + 1 && off == x) || (ref == x + 1 + 0x100000 && off == 4095 - x);
    }
    return false;
  };
  for (uint32_t x = 0; x < stay.size(); ++x) {
    uint64_t value = 0;
    const uint64_t h = stay[x];
    const size_t i = loc->Probe(
        h, [&](uint32_t r, uint32_t o) { return holds_stay(h, r, o); }, &value);
    ASSERT_EQ(value, 0u);
    loc->Fill(i, h, x + 1, x);
  }
  // Churn blocks live at (0x200000 + x, 0) while present.
  std::atomic<bool> stop{false};
  // The model index's protocol: odd while an erase (which may move blocks
  // back) runs; a reader that missed while it moved looks once more.
  std::atomic<uint64_t> erase_epoch{0};
  std::atomic<uint64_t> failures{0}, lookups{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (uint64_t h : stay) {
          uint64_t value = 0;
          auto is_block = [&](uint32_t r, uint32_t o) { return holds_stay(h, r, o); };
          const uint64_t epoch = erase_epoch.load(std::memory_order_acquire);
          size_t i = loc->Find(h, is_block, &value);
          if (i == BlockLocator::kNotFound &&
              (erase_epoch.load(std::memory_order_acquire) != epoch || (epoch & 1) != 0)) {
            i = loc->Find(h, is_block, &value);
          }
          if (i == BlockLocator::kNotFound ||
              !holds_stay(h, BlockLocator::NodeRef(value), BlockLocator::Offset(value))) {
            failures.fetch_add(1, std::memory_order_relaxed);
          }
          lookups.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  // At least 4,000 rounds, and on until the readers ran a while (bounded).
  for (int round = 0; round < 2'000'000 && (round < 4000 || lookups.load() < 20'000); ++round) {
    for (uint32_t x = 0; x < stay.size(); ++x) {
      uint64_t value = 0;
      const uint64_t h = stay[x];
      const size_t i = loc->Find(
          h, [&](uint32_t r, uint32_t o) { return holds_stay(h, r, o); }, &value);
      ASSERT_NE(i, BlockLocator::kNotFound);
      const bool first = BlockLocator::NodeRef(value) == x + 1;
      loc->Relabel(i, first ? x + 1 + 0x100000 : x + 1, first ? 4095 - x : x);
    }
    const uint32_t c = static_cast<uint32_t>(rng() % churn.size());
    const uint64_t h = churn[c];
    auto is_churn = [&](uint32_t r, uint32_t o) { return r == 0x200000 + c && o == 0; };
    uint64_t value = 0;
    const size_t i = loc->Probe(h, is_churn, &value);
    ASSERT_NE(i, BlockLocator::kNotFound);
    if (value == 0) {
      loc->Fill(i, h, 0x200000 + c, 0);
    } else {
      erase_epoch.fetch_add(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      loc->Erase(i);
      erase_epoch.fetch_add(1, std::memory_order_release);
    }
  }
  stop.store(true);
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(failures.load(), 0u) << "of " << lookups.load() << " lookups";
  EXPECT_GT(lookups.load(), 0u);
}

// An entry is 28 bits of node reference and 12 of offset. A value past
// either field is cut to it and never spills into the other field or into a
// neighbouring slot (the model index asserts at compile time that arena
// references and node offsets fit).
TEST(BlockLocatorTest, EntryFieldsAreMaskedToTheirWidths) {
  MemoryCounter memory;
  std::unique_ptr<BlockLocator> loc = BlockLocator::Create(600, &memory);
  ASSERT_NE(loc, nullptr);
  std::mt19937_64 rng(7);
  // A full bucket 0: nine blocks whose home it is, with distinct tags (an
  // entry of slot k starts at bit 152 + 40 k, so some cross a word).
  std::vector<uint64_t> hashes;
  uint32_t tags = 1;  // tag 0 is "free"
  while (hashes.size() < BlockLocator::kBucketSlots) {
    const uint64_t h = rng();
    if (loc->HomeBucket(h) == 0 && (tags >> (h & 0x1F) & 1) == 0) {
      tags |= 1u << (h & 0x1F);
      hashes.push_back(h);
    }
  }
  auto any = [](uint32_t, uint32_t) { return true; };
  std::vector<std::pair<uint32_t, uint32_t>> want;
  for (uint32_t k = 0; k < BlockLocator::kBucketSlots; ++k) {
    loc->Fill(k, hashes[k], 0x100 + 2 * k, 2 * k);
    want.emplace_back(0x100 + 2 * k, 2 * k);
  }
  for (uint32_t k = 0; k < BlockLocator::kBucketSlots; ++k) {
    // One bit past each field: cut off, never spilled into the reference,
    // the next slot's entry or another field.
    loc->Relabel(k, (1u << 28) | (0x200 + 2 * k), (1u << 12) | (2 * k));
    want[k] = {0x200 + 2 * k, 2 * k};
    for (uint32_t j = 0; j < BlockLocator::kBucketSlots; ++j) {
      uint64_t value = 0;
      ASSERT_NE(loc->Find(hashes[j], any, &value), BlockLocator::kNotFound) << k << " " << j;
      EXPECT_EQ(BlockLocator::NodeRef(value), want[j].first)
          << "after slot " << k << ", slot " << j;
      EXPECT_EQ(BlockLocator::Offset(value), want[j].second)
          << "after slot " << k << ", slot " << j;
    }
  }
}

}  // namespace
}  // namespace kvindex::index::internal
