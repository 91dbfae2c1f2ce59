// The SGLang alias map in checkpoints (issue #24), through the real
// Checkpointer, ApplyLoop and RocksDB: a replica restored from a checkpoint
// (its own, or a peer's exported one) answers sgl-router's hashes exactly
// like the replica that applied the whole log, before and after later
// stores, removes and clears; a checkpoint without the record restores an
// empty map; a damaged record makes the checkpoint unusable like any
// damaged checkpoint (an older one is restored).
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shared/compat/sglang_alias_map.h"
#include "shared/consume/apply_loop.h"
#include "shared/consume/in_process_log_reader.h"
#include "shared/index/kv_index.h"
#include "storage/checkpoint_format.h"
#include "storage/checkpoint_store.h"
#include "storage/checkpointer.h"
#include "storage/testing/temp_dir.h"

namespace kvindex::storage {
namespace {

using testing::TempDir;

// As the router's SglangAliasCheckpoint (services/router/sglang_wiring.h).
class MapCheckpoint : public AliasCheckpoint {
 public:
  explicit MapCheckpoint(compat::SglangAliasMap* map) : map_(map) {}
  std::string Save() override { return map_->SaveState(); }
  Status Restore(std::string_view state) override { return map_->RestoreState(state); }

 private:
  compat::SglangAliasMap* map_;
};

// One router: its log, index, alias map (fed by the apply loop, as the
// router's on_applied does) and checkpointer.
struct Replica {
  explicit Replica(const std::string& dir) {
    index.set_departure_observer(aliases.departure_observer());
    consume::ApplyOptions options;
    options.on_applied = [this](std::span<const PlacementEvent> events) {
      aliases.OnApplied(events);
    };
    apply = std::make_unique<consume::ApplyLoop>(&log, &index, nullptr, options);
    CheckpointerOptions checkpoint;
    checkpoint.dir = dir;
    checkpoint.interval = std::chrono::milliseconds(0);
    checkpointer = std::make_unique<Checkpointer>(checkpoint, apply.get(), &index, nullptr);
    checkpointer->SetAliases(std::make_shared<MapCheckpoint>(&aliases));
  }
  ~Replica() { apply->Stop(); }
  // Publishes each event (one message each) and waits until all applied.
  bool Feed(const std::vector<PlacementEvent>& events) {
    const uint64_t target = index.Stats().applied_seq + events.size();
    for (const PlacementEvent& event : events) {
      if (!sink.Publish(std::vector<PlacementEvent>{event}).ok()) return false;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (index.Stats().applied_seq < target && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return index.Stats().applied_seq == target;
  }

  InProcessSink sink;
  consume::InProcessLogReader log{&sink};
  index::KvIndex index;
  compat::SglangAliasMap aliases{&index};
  std::unique_ptr<consume::ApplyLoop> apply;
  std::unique_ptr<Checkpointer> checkpointer;
};

PlacementEvent Stored(std::string worker, std::vector<uint64_t> blocks,
                      std::vector<uint64_t> sglang) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "m";
  e.source = {std::move(worker), 0};
  e.block_size = 16;
  e.block_hashes = std::move(blocks);
  e.sglang_hashes = std::move(sglang);
  return e;
}

PlacementEvent Removed(std::string worker, std::vector<uint64_t> blocks) {
  PlacementEvent e;
  e.kind = PlacementKind::kRemoved;
  e.model = "m";
  e.source = {std::move(worker), 0};
  e.block_hashes = std::move(blocks);
  return e;
}

PlacementEvent Cleared(std::string worker) {
  PlacementEvent e;
  e.kind = PlacementKind::kCleared;
  e.model = "m";
  e.source = {std::move(worker), 0};
  return e;
}

// Before the checkpoint: aliases shared by two sources, a conflict (102
// poisoned), and a seeded run of chains.
std::vector<PlacementEvent> Before() {
  std::vector<PlacementEvent> events = {
      Stored("a", {11, 12, 13}, {101, 102, 103}),
      Stored("b", {11}, {101}),
      Stored("liar", {66}, {102}),
      Stored("c", {21, 22}, {201, 202}),
  };
  std::mt19937_64 rng(24);
  for (int i = 0; i < 40; ++i) {
    std::vector<uint64_t> blocks, sglang;
    const uint64_t first = 1000 + rng() % 200;
    for (uint64_t h = first; h < first + 1 + rng() % 8; ++h) {
      blocks.push_back(h);
      sglang.push_back(h * 7919);
    }
    events.push_back(Stored("w" + std::to_string(rng() % 3), blocks, sglang));
    if (i % 5 == 4) events.push_back(Removed("w" + std::to_string(rng() % 3), {first}));
  }
  return events;
}

// After it: removes and a clear of blocks aliased before, a store under the
// poisoned hash, new aliases.
std::vector<PlacementEvent> After() {
  return {
      Removed("a", {11}),                 // b still holds 11: 101 stays
      Removed("c", {21}),                 // 201 goes
      Stored("d", {77}, {102}),           // poisoned: refused
      Cleared("b"),                       // 11 held by nobody: 101 goes
      Stored("e", {31, 32}, {301, 302}),  // new
      Cleared("w1"),
      Removed("w0", {1100, 1101, 1102}),
  };
}

std::vector<uint64_t> SglangHashes(const std::vector<PlacementEvent>& log) {
  std::vector<uint64_t> out;
  for (const PlacementEvent& e : log)
    out.insert(out.end(), e.sglang_hashes.begin(), e.sglang_hashes.end());
  return out;
}

// Every SGLang hash of the log translated as `replica` answers it, then
// matched in its index (the SGLang indexer's path): equal answers.
void ExpectSameAnswers(Replica& restored, Replica& whole, const std::vector<uint64_t>& sglang,
                       const std::string& when) {
  EXPECT_EQ(restored.index.Stats().digest, whole.index.Stats().digest) << when;
  EXPECT_EQ(restored.aliases.Entries(), whole.aliases.Entries()) << when;
  EXPECT_EQ(restored.aliases.Stats().poisoned, whole.aliases.Stats().poisoned) << when;
  for (uint64_t hash : sglang) {
    std::vector<uint64_t> a = {hash}, b = {hash};
    restored.aliases.Translate("m", a);
    whole.aliases.Translate("m", b);
    ASSERT_EQ(a, b) << when << ": SGLang hash " << hash;
    auto ra = restored.index.MatchSequenceHashes("m", a);
    auto rb = whole.index.MatchSequenceHashes("m", b);
    ASSERT_EQ(ra.ok(), rb.ok()) << when;
    if (ra.ok()) {
      ASSERT_EQ(ra->workers.size(), rb->workers.size()) << when << ": SGLang hash " << hash;
    }
  }
}

TEST(AliasCheckpointTest, ARestoredReplicaAnswersSglangHashesLikeTheWholeLog) {
  TempDir dir;
  const std::vector<PlacementEvent> before = Before(), after = After();
  std::vector<uint64_t> sglang = SglangHashes(before);
  for (uint64_t h : SglangHashes(after)) sglang.push_back(h);

  Replica whole(dir.path() + "/whole");
  ASSERT_TRUE(whole.checkpointer->Restore(&whole.apply->agents()).ok());
  ASSERT_TRUE(whole.apply->Start().ok());
  ASSERT_TRUE(whole.Feed(before));
  ASSERT_GT(whole.aliases.Stats().entries, 10u);
  ASSERT_EQ(whole.aliases.Stats().poisoned, 1u);
  ASSERT_TRUE(whole.checkpointer->WriteNow().ok());
  uint64_t exported_seq = 0;
  StatusOr<std::string> exported = whole.checkpointer->ExportNewest(&exported_seq);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ASSERT_EQ(exported_seq, before.size());
  const std::vector<compat::SglangAlias> at_checkpoint = whole.aliases.Entries();
  ASSERT_TRUE(whole.Feed(after));
  whole.checkpointer.reset();  // closes its database for the next replica

  // From its own checkpoint directory, and from the peer's export
  // (--bootstrap-from).
  for (const bool bootstrap : {false, true}) {
    const std::string how = bootstrap ? "bootstrapped" : "restarted";
    Replica replica(bootstrap ? dir.path() + "/new" : dir.path() + "/whole");
    if (bootstrap) {
      ASSERT_TRUE(replica.checkpointer->Import(*exported).ok());
    }
    StatusOr<RestoreResult> restored = replica.checkpointer->Restore(&replica.apply->agents());
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_TRUE(restored->loaded) << how;
    ASSERT_EQ(restored->applied_seq, before.size());
    EXPECT_EQ(replica.aliases.Entries(), at_checkpoint) << how;
    EXPECT_EQ(replica.aliases.Stats().poisoned, 1u) << how;
    ASSERT_TRUE(replica.apply->Start().ok());
    ASSERT_TRUE(replica.Feed(after));
    ExpectSameAnswers(replica, whole, sglang, how + ", after the later messages");
    EXPECT_EQ(replica.aliases.Find("m", 102), std::nullopt);  // still poisoned
    EXPECT_EQ(replica.aliases.Find("m", 301), 31u);
  }
}

TEST(AliasCheckpointTest, NoRecordRestoresEmptyADamagedOneFallsBackToAnOlderCheckpoint) {
  TempDir dir;
  const std::string db = dir.path() + "/ckpt";
  std::vector<PlacementEvent> first = Before();
  std::vector<compat::SglangAlias> at_first;
  uint64_t newest = 0;
  {
    Replica whole(db);
    ASSERT_TRUE(whole.checkpointer->Restore(&whole.apply->agents()).ok());
    ASSERT_TRUE(whole.apply->Start().ok());
    ASSERT_TRUE(whole.Feed(first));
    ASSERT_TRUE(whole.checkpointer->WriteNow().ok());
    at_first = whole.aliases.Entries();
    ASSERT_TRUE(whole.Feed(After()));
    ASSERT_TRUE(whole.checkpointer->WriteNow().ok());
    ASSERT_NE(whole.aliases.Entries(), at_first);
  }
  {
    auto store = CheckpointStore::Open(db);
    ASSERT_TRUE(store.ok());
    newest = (*store)->List().front().id;
  }
  {
    // The newest checkpoint's alias record damaged (same size, other bytes).
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), db, &raw).ok());
    std::unique_ptr<rocksdb::DB> rdb(raw);
    std::string value;
    ASSERT_TRUE(rdb->Get(rocksdb::ReadOptions(), format::AliasKey(newest, 0), &value).ok());
    value[value.size() / 2] ^= 0x40;
    ASSERT_TRUE(rdb->Put(rocksdb::WriteOptions(), format::AliasKey(newest, 0), value).ok());
  }
  {
    Replica replica(db);
    StatusOr<RestoreResult> restored = replica.checkpointer->Restore(&replica.apply->agents());
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_TRUE(restored->loaded);
    EXPECT_EQ(restored->skipped, 1u);
    EXPECT_EQ(restored->applied_seq, first.size());
    EXPECT_EQ(replica.aliases.Entries(), at_first);
  }
  // A checkpoint without the record (a router without the map, or one
  // before version 7) restores the index and an empty map.
  const std::string plain = dir.path() + "/plain";
  {
    Replica without(plain);
    without.checkpointer->SetAliases(nullptr);
    ASSERT_TRUE(without.checkpointer->Restore(&without.apply->agents()).ok());
    ASSERT_TRUE(without.apply->Start().ok());
    ASSERT_TRUE(without.Feed(first));
    ASSERT_TRUE(without.checkpointer->WriteNow().ok());
  }
  Replica replica(plain);
  {
    // Whatever the map held before goes.
    index::KvIndex scratch;
    compat::SglangAliasMap filled(&scratch);
    scratch.ApplyMessage(first, 1);
    filled.OnApplied(first);
    ASSERT_TRUE(replica.aliases.RestoreState(filled.SaveState()).ok());
    ASSERT_FALSE(replica.aliases.Entries().empty());
  }
  StatusOr<RestoreResult> restored = replica.checkpointer->Restore(&replica.apply->agents());
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(restored->loaded);
  EXPECT_EQ(restored->applied_seq, first.size());
  EXPECT_GT(replica.index.Stats().entries[0], 0u);
  EXPECT_TRUE(replica.aliases.Entries().empty());
  EXPECT_EQ(replica.aliases.Stats().poisoned, 0u);
}

}  // namespace
}  // namespace kvindex::storage
