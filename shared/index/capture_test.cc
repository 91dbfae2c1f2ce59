// KvIndex::BeginCapture (issue #26.8): a capture opened on the writer thread
// reads the entries of that moment while the writer goes on applying, and
// the writer is never held for the whole capture.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shared/index/kv_index.h"

namespace kvindex::index {
namespace {

using Entry = std::tuple<std::string, std::string, uint32_t, int, uint64_t>;
using Entries = std::multiset<Entry>;

Entries LiveEntries(const KvIndex& index) {
  Entries out;
  index.ForEachEntry([&](std::string_view model, const SourceKey& s, Tier t, uint64_t h) {
    out.emplace(std::string(model), s.worker, s.dp_rank, static_cast<int>(t), h);
  });
  return out;
}

// A random stream over a few models, ~100 sources (two holder groups) and
// chains that share prefixes: stores, removals that split nodes, clears and
// worker expiries that retire and free nodes.
class Workload {
 public:
  explicit Workload(uint64_t seed) : rng_(seed) {}
  PlacementEvent Next() {
    PlacementEvent e;
    e.model = rng_() % 4 == 0 ? "m2" : "m1";
    e.source = {"w" + std::to_string(rng_() % 50), static_cast<uint32_t>(rng_() % 2)};
    e.tier = static_cast<Tier>(rng_() % kNumTiers);
    e.block_size = 16;
    const uint64_t chain = rng_() % 40;
    const size_t from = rng_() % 8, len = 1 + rng_() % 40;
    for (size_t k = from; k < from + len; ++k) {
      e.block_hashes.push_back(k < 6 ? 1000 + k : chain * 1000003 + k);
    }
    const uint64_t dice = rng_() % 100;
    if (dice < 55) {
      e.kind = PlacementKind::kStored;
    } else if (dice < 92) {
      e.kind = PlacementKind::kRemoved;
      if (rng_() % 2) std::reverse(e.block_hashes.begin(), e.block_hashes.end());
    } else if (dice < 97) {
      e.kind = PlacementKind::kCleared;
      e.block_hashes.clear();
      if (rng_() % 2) e.model.clear();
    } else {
      e.kind = PlacementKind::kWorkerExpired;
      e.block_hashes.clear();
    }
    return e;
  }

 private:
  std::mt19937_64 rng_;
};

void ApplyEvents(KvIndex* index, Workload* workload, size_t events, uint64_t* position) {
  for (size_t i = 0; i < events; ++i) index->Apply(workload->Next(), ++*position);
}

// Reads a capture the way a checkpoint does: every run, with its model's name.
Entries Read(IndexCapture* capture, const std::function<void()>& on_first_run = nullptr) {
  Entries out;
  bool first = true;
  capture->ForEachRun(
      [&](uint32_t model, uint32_t source, Tier t, std::span<const uint64_t> hashes) {
        if (first && on_first_run) on_first_run();
        first = false;
        const SourceKey& s = capture->models()[model].sources[source];
        for (uint64_t h : hashes) {
          out.emplace(capture->models()[model].name, s.worker, s.dp_rank, static_cast<int>(t), h);
        }
      });
  return out;
}

TEST(CaptureTest, ApplyGoesOnWhileTheReaderIsHeldMidCapture) {
  KvIndex index;
  Workload workload(7);
  uint64_t position = 0;
  ApplyEvents(&index, &workload, 4000, &position);
  const Entries expected = LiveEntries(index);
  const uint64_t digest = index.Stats().digest;
  ASSERT_GT(expected.size(), 1000u);
  auto capture = index.BeginCapture();
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_EQ((*capture)->stats().digest, digest);
  EXPECT_FALSE(index.BeginCapture().ok()) << "one capture at a time";

  std::promise<void> reading, release;
  std::shared_future<void> released = release.get_future().share();
  Entries read;
  std::thread reader([&] {
    read = Read(capture->get(), [&] {
      reading.set_value();
      released.wait();  // held inside the capture, between two runs
    });
  });
  reading.get_future().wait();
  // The writer applies (removals, clears, expiries that free nodes the
  // capture has not read yet) while the reader is held.
  std::atomic<bool> applied{false};
  std::thread writer([&] {
    ApplyEvents(&index, &workload, 4000, &position);
    applied.store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!applied.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool went_on = applied.load();
  release.set_value();
  reader.join();
  writer.join();
  EXPECT_TRUE(went_on) << "apply was blocked while the capture was being read";
  EXPECT_NE(index.Stats().digest, digest) << "the writer changed nothing: the test proves nothing";
  EXPECT_TRUE(read == expected) << "captured " << read.size() << " entries, " << expected.size()
                                << " at the capture's start";
  capture->reset();
  EXPECT_TRUE(index.BeginCapture().ok()) << "a closed capture lets the next one open";
}

TEST(CaptureTest, CaptureEqualsTheStateAtItsStartUnderConcurrentApply) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    KvIndex index;
    Workload workload(seed);
    uint64_t position = 0;
    std::mt19937_64 rng(seed * 31);
    for (int round = 0; round < 4; ++round) {
      ApplyEvents(&index, &workload, 300 + rng() % 1500, &position);
      const Entries expected = LiveEntries(index);
      auto capture = index.BeginCapture();
      ASSERT_TRUE(capture.ok()) << capture.status();
      Entries read;
      std::thread reader([&] { read = Read(capture->get()); });
      ApplyEvents(&index, &workload, 200 + rng() % 2000, &position);  // beside the reader
      reader.join();
      ASSERT_TRUE(read == expected)
          << "seed " << seed << " round " << round << ": captured " << read.size() << " entries, "
          << expected.size() << " at the capture's start";
    }
  }
}

TEST(CaptureTest, AnAbandonedCaptureLeavesTheWriterAlone) {
  KvIndex index;
  Workload workload(3);
  uint64_t position = 0;
  ApplyEvents(&index, &workload, 2000, &position);
  {
    auto capture = index.BeginCapture();
    ASSERT_TRUE(capture.ok());
  }  // never read
  ApplyEvents(&index, &workload, 2000, &position);
  const Entries expected = LiveEntries(index);
  auto capture = index.BeginCapture();
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_TRUE(Read(capture->get()) == expected);
}

}  // namespace
}  // namespace kvindex::index
