// CheckpointStore and CheckpointImage against a real RocksDB in a temp dir:
// a seeded random index survives capture -> write -> load -> restore with
// the same digest, entries and agent table (into KvIndex and the
// ReferenceIndex); damaged files are detected and skipped; old checkpoints
// are pruned; a failed write leaves the previous checkpoints usable.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shared/base/bytes.h"
#include "shared/consume/apply_loop.h"
#include "shared/consume/in_process_log_reader.h"
#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"
#include "shared/index/testing/events.h"
#include "storage/checkpoint_format.h"
#include "storage/checkpoint_store.h"
#include "storage/checkpointer.h"
#include "storage/testing/temp_dir.h"

namespace kvindex::storage {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

using Entry = std::tuple<std::string, std::string, uint32_t, int, uint64_t>;

// The newest usable checkpoint restored into `index` (the router's path);
// its id, or 0 when the store holds none that restores.
uint64_t RestoreNewestInto(const CheckpointStore& store, index::IndexInterface* index,
                           consume::AgentTable* agents = nullptr, size_t* skipped = nullptr) {
  uint64_t id = 0;
  size_t skipped_here = 0;
  auto manifest = RestoreNewest(store, index, agents, &id, &skipped_here);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  if (skipped != nullptr) *skipped = skipped_here;
  return manifest.ok() && manifest->has_value() ? id : 0;
}

std::set<Entry> Entries(const index::IndexInterface& index) {
  std::set<Entry> out;
  index.ForEachEntry([&](std::string_view model, const SourceKey& source, Tier tier, uint64_t h) {
    out.emplace(std::string(model), source.worker, source.dp_rank, static_cast<int>(tier), h);
  });
  return out;
}

// Seeded stream: stores (shared prefixes), removals and clears over three
// models, a few sources, every tier; position n per message.
void Fill(index::IndexInterface* index, uint64_t seed, int messages) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> pool;
  for (int i = 0; i < 400; ++i) pool.push_back(rng() | 1);
  for (int m = 1; m <= messages; ++m) {
    PlacementEvent event;
    const int model = static_cast<int>(rng() % 3);
    event.model = "model/" + std::to_string(model) + " v1";
    event.block_size = 16 * (model + 1);
    event.source = {"worker-" + std::to_string(rng() % 4), static_cast<uint32_t>(rng() % 2)};
    event.tier = static_cast<Tier>(rng() % kNumTiers);
    const uint64_t roll = rng() % 10;
    const size_t start = rng() % 300, length = 1 + rng() % 60;
    for (size_t i = start; i < std::min(pool.size(), start + length); ++i) {
      event.block_hashes.push_back(pool[i]);
    }
    event.kind = roll < 7 ? PlacementKind::kStored
                          : (roll < 9 ? PlacementKind::kRemoved : PlacementKind::kCleared);
    if (event.kind == PlacementKind::kCleared) event.block_hashes.clear();
    index->Apply(event, static_cast<uint64_t>(m));
  }
}

// Block 1 of model "m" stored on `worker` (rank 0), as `node`'s agent sends it.
PlacementEvent StoredBy(const std::string& node, const std::string& worker) {
  PlacementEvent stored;
  stored.kind = PlacementKind::kStored;
  stored.model = "m";
  stored.agent = node;
  stored.source = {worker, 0};
  stored.block_hashes = {1};
  return stored;
}

void FillAgents(consume::AgentTable& table) {
  consume::LogBatch::Message message;
  message.position = 3;
  message.header = {"node-a", 17, 1};
  std::vector<PlacementEvent> clears;
  table.Admit(message, &clears);
  PlacementEvent heartbeat;
  heartbeat.kind = PlacementKind::kHeartbeat;
  heartbeat.agent = "node-a";
  heartbeat.lease_ms = 3000;
  heartbeat.sources = {{"worker-0", 0}, {"worker-1", 1}};
  table.Observe(heartbeat, 3, std::chrono::steady_clock::now(), &clears);
  // An agent numbering its subjects (docs/events.md, "Numbering").
  consume::LogBatch::Message numbered;
  numbered.position = 4;
  numbered.subject = "kvindex.events.m.node-b";
  numbered.header = {.agent = "node-b", .incarnation = 9, .msg_seq = 5, .subject_seq = 2};
  const PlacementEvent stored = StoredBy("node-b", "worker-2");
  consume::LogRefusal refusal;
  table.Admit(numbered, {&stored, 1}, &clears, &refusal);
}

void ExpectSameAgents(const consume::AgentTable& a, const consume::AgentTable& b) {
  const auto x = a.Agents(), y = b.Agents();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].agent, y[i].agent);
    EXPECT_EQ(x[i].incarnation, y[i].incarnation);
    EXPECT_EQ(x[i].last_msg_seq, y[i].last_msg_seq);
    EXPECT_EQ(x[i].last_heartbeat_position, y[i].last_heartbeat_position);
    EXPECT_EQ(x[i].lease_ms, y[i].lease_ms);
    EXPECT_EQ(x[i].sources, y[i].sources);
    EXPECT_EQ(x[i].renumber, y[i].renumber);
    EXPECT_EQ(x[i].model_sources, y[i].model_sources);
    EXPECT_EQ(x[i].live_position, y[i].live_position);
    EXPECT_EQ(x[i].heartbeated, y[i].heartbeated);
    ASSERT_EQ(x[i].subjects.size(), y[i].subjects.size());
    for (auto p = x[i].subjects.begin(), q = y[i].subjects.begin(); p != x[i].subjects.end();
         ++p, ++q) {
      EXPECT_EQ(p->first, q->first);
      EXPECT_EQ(p->second.incarnation, q->second.incarnation);
      EXPECT_EQ(p->second.last_seq, q->second.last_seq);
      EXPECT_EQ(p->second.model, q->second.model);
      EXPECT_EQ(p->second.renumber, q->second.renumber);
    }
  }
}

std::vector<fs::path> SstFiles(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".sst") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointStoreTest, RoundTripIntoBothIndexes) {
  TempDir dir;
  index::KvIndex source;
  Fill(&source, 7, 3000);
  consume::AgentTable agents;
  FillAgents(agents);
  const CheckpointImage image = CaptureCheckpoint(source, &agents);
  ASSERT_TRUE(image.Verify().ok()) << image.Verify();
  EXPECT_EQ(image.total_entries(), Entries(source).size());
  ASSERT_GT(image.total_entries(), 1000u);

  auto store = CheckpointStore::Open(dir.path() + "/db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto info = (*store)->Write(image);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->applied_seq, 3000u);
  EXPECT_EQ(info->digest, source.Stats().digest);
  // Raw hashes: 8 bytes per entry, plus a few bytes per run (short here).
  EXPECT_LT(info->bytes, image.total_entries() * 8 + image.runs.size() * 6 + 4096);

  index::KvIndex restored;
  index::ReferenceIndex reference;
  consume::AgentTable restored_agents;
  ASSERT_EQ(RestoreNewestInto(**store, &restored, &restored_agents), info->id);
  ASSERT_EQ(RestoreNewestInto(**store, &reference), info->id);
  EXPECT_EQ(restored.Stats().digest, source.Stats().digest);
  EXPECT_EQ(restored.Stats().applied_seq, 3000u);
  EXPECT_EQ(reference.Stats().digest, source.Stats().digest);
  EXPECT_EQ(Entries(restored), Entries(source));
  EXPECT_EQ(Entries(reference), Entries(source));
  EXPECT_EQ(restored.Models(), source.Models());
  for (const std::string& model : source.Models()) {
    EXPECT_EQ(restored.BlockSize(model), source.BlockSize(model));
  }
  ExpectSameAgents(restored_agents, agents);

  // The restored index goes on exactly like the original.
  Fill(&source, 8, 100);  // positions 1..100 are below 3000: ignored by both
  Fill(&restored, 8, 100);
  EXPECT_EQ(restored.Stats().digest, source.Stats().digest);
}

TEST(CheckpointStoreTest, StreamedRestoreEqualsTheOriginal) {
  TempDir dir;
  index::KvIndex source;
  Fill(&source, 9, 6000);
  consume::AgentTable agents;
  FillAgents(agents);
  auto store = CheckpointStore::Open(dir.path() + "/db");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, &agents)).ok());
  index::KvIndex restored;
  consume::AgentTable restored_agents;
  uint64_t id = 0;
  size_t skipped = 0;
  auto manifest = RestoreNewest(**store, &restored, &restored_agents, &id, &skipped);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(manifest->has_value());
  EXPECT_EQ(skipped, 0u);
  EXPECT_EQ(restored.Stats().digest, source.Stats().digest);
  EXPECT_EQ(Entries(restored), Entries(source));
  ExpectSameAgents(restored_agents, agents);
  // A restore into a non-empty index is refused, not retried.
  EXPECT_FALSE(RestoreNewest(**store, &restored, nullptr, &id, &skipped).ok());
}

// Review s11 item 3: the `renumber` flags (an undecodable message already
// failed closed) are part of what a replica judges the next message by. A
// replica restored from a checkpoint taken between an undecodable message
// and the next one judges that one as the replica that read the whole log:
// node-a numbers its subjects (the control subject's flag), node-b only
// msg_seq (the agent's flag).
TEST(CheckpointStoreTest, ARestoredTableJudgesTheNextMessageAsTheWholeLog) {
  constexpr uint64_t kIncarnation = 1'700'000'000'000'000'000ull;
  auto message = [&](uint64_t position, const std::string& node, const std::string& token,
                     uint64_t msg_seq, uint64_t subject_seq, bool invalid) {
    consume::LogBatch::Message m;
    m.position = position;
    m.subject = "kvindex.events." + token + "." + node;
    m.header = {
        .agent = node, .incarnation = kIncarnation, .msg_seq = msg_seq, .subject_seq = subject_seq};
    m.invalid = invalid;
    return m;
  };
  auto heartbeat = [](const std::string& node, const std::string& worker) {
    PlacementEvent e;
    e.kind = PlacementKind::kHeartbeat;
    e.agent = node;
    e.lease_ms = 1000;
    e.sources = {{worker, 0}};
    return e;
  };
  auto feed = [](consume::AgentTable& table, const consume::LogBatch::Message& m,
                 std::vector<PlacementEvent> events) {
    std::vector<PlacementEvent> clears;
    consume::LogRefusal refusal;
    const auto verdict = table.Admit(m, events, &clears, &refusal);
    if (verdict == consume::AgentTable::Verdict::kApply) {
      for (const PlacementEvent& event : events) {
        table.Observe(event, m.position, std::chrono::steady_clock::now(), &clears);
      }
    }
    return std::make_pair(verdict, clears.size());
  };
  const PlacementEvent stored = StoredBy("node-a", "wa");

  consume::AgentTable whole;
  feed(whole, message(1, "node-a", "_agent", 1, 1, false), {heartbeat("node-a", "wa")});
  feed(whole, message(2, "node-b", "_agent", 1, 0, false), {heartbeat("node-b", "wb")});
  // Undecodable: each clears its node's sources, every model.
  feed(whole, message(3, "node-a", "_agent", 0, 0, true), {});
  feed(whole, message(4, "node-b", "_agent", 0, 0, true), {});
  feed(whole, message(5, "node-a", "m", 3, 1, false), {stored});

  TempDir dir;
  index::KvIndex index;
  auto store = CheckpointStore::Open(dir.path() + "/db");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Write(CaptureCheckpoint(index, &whole)).ok());
  index::KvIndex restored_index;
  consume::AgentTable restored;
  ASSERT_NE(RestoreNewestInto(**store, &restored_index, &restored), 0u);

  // The next numbers follow the undecodable ones: no loss.
  for (consume::AgentTable* table : {&whole, &restored}) {
    const auto a =
        feed(*table, message(6, "node-a", "_agent", 4, 3, false), {heartbeat("node-a", "wa")});
    const auto b =
        feed(*table, message(7, "node-b", "_agent", 3, 0, false), {heartbeat("node-b", "wb")});
    EXPECT_EQ(a, std::make_pair(consume::AgentTable::Verdict::kApply, size_t{0}));
    EXPECT_EQ(b, std::make_pair(consume::AgentTable::Verdict::kApply, size_t{0}));
  }
  ExpectSameAgents(restored, whole);
  const auto x = whole.Agents(), y = restored.Agents();
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) EXPECT_EQ(x[i].gaps, y[i].gaps);
}

// The version 6 section of `image`'s manifest (the agents' lives and claims
// per model), as EncodeManifest writes it.
std::string Version6Section(const CheckpointImage& image) {
  std::string out;
  for (const auto& agent : image.agents) {
    bytes::PutVarint(&out, agent.live_position);
    out.push_back(agent.heartbeated ? 1 : 0);
    bytes::PutVarint(&out, agent.model_sources.size());
    for (const auto& [model, sources] : agent.model_sources) {
      bytes::PutString(&out, model);
      bytes::PutVarint(&out, sources.size());
      for (const SourceKey& source : sources) {
        bytes::PutString(&out, source.worker);
        bytes::PutVarint(&out, source.dp_rank);
      }
    }
  }
  return out;
}

// `manifest` cut before its last `cut` bytes (the checksum excluded),
// labelled `version`, checksummed again.
std::string OlderManifest(const std::string& manifest, size_t cut, char version) {
  std::string older = manifest.substr(0, manifest.size() - 8 - cut);
  older[3] = version;  // big-endian version
  const uint64_t checksum = XXH3_64bits(older.data(), older.size());
  older.append(reinterpret_cast<const char*>(&checksum), 8);  // little-endian host
  return older;
}

// Version 6 keeps each agent's claims per model, where it became live and
// whether it heartbeated since (docs/scaling.md, "Ownership and liveness");
// a version 5 manifest still decodes: its sources read as announced, a node
// with a lease or a heartbeat position as having heartbeated.
TEST(CheckpointStoreTest, Version6KeepsClaimsPerModelAndLives) {
  index::KvIndex source;
  consume::AgentTable agents;
  FillAgents(agents);
  std::vector<PlacementEvent> clears;  // node-b's store claims worker-2 in "m"
  agents.Observe(StoredBy("node-b", "worker-2"), 4, std::chrono::steady_clock::now(), &clears);
  CheckpointImage image = CaptureCheckpoint(source, &agents);
  ASSERT_EQ(image.agents.size(), 2u);
  EXPECT_EQ(image.agents[0].live_position, 3u);
  EXPECT_TRUE(image.agents[0].heartbeated);
  EXPECT_EQ(image.agents[1].live_position, 4u);
  EXPECT_FALSE(image.agents[1].heartbeated);  // node-b only stored
  ASSERT_EQ(image.agents[1].model_sources.size(), 1u);
  EXPECT_TRUE(image.agents[1].sources.empty());
  const std::string v6 = format::EncodeManifest(image, 0, 0);
  auto decoded = format::DecodeManifest(v6);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  consume::AgentTable restored;
  restored.Restore(decoded->image.agents, std::chrono::steady_clock::now());
  ExpectSameAgents(restored, agents);
  EXPECT_EQ(restored.Owner({"worker-2", 0}, "m"), "node-b");
  EXPECT_EQ(restored.Owner({"worker-2", 0}, "other"), std::nullopt);

  auto v5 = format::DecodeManifest(OlderManifest(v6, 1 + Version6Section(image).size(), 5));
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_TRUE(v5->image.agents[0].heartbeated);
  EXPECT_FALSE(v5->image.agents[1].heartbeated);
  EXPECT_EQ(v5->image.agents[1].live_position, 0u);
  EXPECT_TRUE(v5->image.agents[1].model_sources.empty());
}

// A version 4 manifest (before the renumber flags) still decodes: the same
// manifest as version 5 without the flag bytes, flags read as false; and a
// version 6 one (before the alias record) reads as having none.
TEST(CheckpointStoreTest, AVersion4ManifestStillDecodes) {
  index::KvIndex source;
  consume::AgentTable agents;
  FillAgents(agents);
  CheckpointImage image = CaptureCheckpoint(source, &agents);
  size_t flag_bytes = 0;
  for (const auto& agent : image.agents) flag_bytes += 1 + agent.subjects.size();
  ASSERT_EQ(flag_bytes, 3u);  // node-a; node-b and its subject "m"
  const std::string v6 = format::EncodeManifest(image, 0, 0);
  // Version 7 ends with one byte (no alias record) before the checksum.
  std::string v4 = OlderManifest(v6, 1 + Version6Section(image).size() + flag_bytes, 4);
  auto no_aliases = format::DecodeManifest(OlderManifest(v6, 1, 6));
  ASSERT_TRUE(no_aliases.ok()) << no_aliases.status();
  EXPECT_FALSE(no_aliases->image.aliases.has_value());
  EXPECT_FALSE(no_aliases->aliases.has_value());
  auto decoded = format::DecodeManifest(v4);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->image.agents.size(), 2u);
  EXPECT_EQ(decoded->image.agents[1].subjects.at("m").last_seq, 2u);
  EXPECT_FALSE(decoded->image.agents[1].subjects.at("m").renumber);
  // Version 5 and later carry the flags.
  image.agents[1].renumber = true;
  image.agents[1].subjects.at("m").renumber = true;
  auto flagged = format::DecodeManifest(format::EncodeManifest(image, 0, 0));
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  EXPECT_TRUE(flagged->image.agents[1].renumber);
  EXPECT_TRUE(flagged->image.agents[1].subjects.at("m").renumber);
  EXPECT_FALSE(flagged->image.agents[0].renumber);
}

// WriteCapture names sources by each model's own ids: here "w2" is id 1 of
// model "a" and id 0 of model "b", and "w1" id 0 of "a" only.
TEST(CheckpointStoreTest, WriteCaptureKeepsEachModelsSourceIdsApart) {
  TempDir dir;
  index::KvIndex source;
  uint64_t position = 0;
  source.Apply(index::testing::Stored("w1", Tier::kDevice, {1, 2, 3}, 0, "a"), ++position);
  source.Apply(index::testing::Stored("w2", Tier::kHost, {1, 2, 4}, 0, "a"), ++position);
  source.Apply(index::testing::Stored("w2", Tier::kDevice, {7, 8}, 0, "b"), ++position);
  source.Apply(index::testing::Stored("w3", Tier::kDevice, {9}, 0, "b"), ++position);
  auto store = CheckpointStore::Open(dir.path() + "/db");
  ASSERT_TRUE(store.ok());
  auto capture = source.BeginCapture();
  ASSERT_TRUE(capture.ok());
  auto info = (*store)->WriteCapture(CaptureManifest(nullptr), capture->get());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->sources, 3u);
  index::KvIndex restored;
  ASSERT_EQ(RestoreNewestInto(**store, &restored), info->id);
  EXPECT_EQ(restored.Stats().digest, source.Stats().digest);
  EXPECT_EQ(Entries(restored), Entries(source));
}

TEST(CheckpointStoreTest, EmptyIndexAndModelsWithoutEntries) {
  TempDir dir;
  index::KvIndex source;
  PlacementEvent event;
  event.model = "m";
  event.block_size = 32;
  event.source = {"w", 0};
  event.block_hashes = {1, 2, 3};
  source.Apply(event, 5);
  event.kind = PlacementKind::kRemoved;
  source.Apply(event, 6);  // the model stays known, with no entries
  const CheckpointImage image = CaptureCheckpoint(source, nullptr);
  auto store = CheckpointStore::Open(dir.path() + "/db");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Write(image).ok());
  index::KvIndex restored;
  ASSERT_NE(RestoreNewestInto(**store, &restored), 0u);
  EXPECT_EQ(restored.Models(), std::vector<std::string>{"m"});
  EXPECT_EQ(restored.BlockSize("m"), 32u);
  EXPECT_EQ(restored.Stats().applied_seq, 6u);
  EXPECT_TRUE(restored.MatchSequenceHashes("m", std::vector<uint64_t>{1}).ok());
}

TEST(CheckpointStoreTest, VerifyCatchesAChangedHashOrCount) {
  index::KvIndex source;
  Fill(&source, 3, 500);
  CheckpointImage image = CaptureCheckpoint(source, nullptr);
  ASSERT_TRUE(image.Verify().ok());
  CheckpointImage changed = image;
  changed.hashes[changed.hashes.size() / 2] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(changed.Verify()));
  changed = image;
  changed.entries[0] += 1;
  EXPECT_TRUE(absl::IsDataLoss(changed.Verify()));
  changed = image;
  changed.runs.back().end += 1;  // past the hashes or into another run's
  EXPECT_FALSE(changed.Verify().ok());
  // A restore into a non-empty index is refused.
  EXPECT_TRUE(absl::IsFailedPrecondition(RestoreCheckpoint(image, &source, nullptr)));
}

TEST(CheckpointStoreTest, KeepsTheNewestAndIdsGrowAcrossReopen) {
  TempDir dir;
  index::KvIndex source;
  uint64_t last_id = 0;
  for (int round = 0; round < 2; ++round) {
    auto store = CheckpointStore::Open(dir.path() + "/db", {.keep = 2});
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 3; ++i) {
      Fill(&source, 100 + round * 10 + i, 200);
      auto info = (*store)->Write(CaptureCheckpoint(source, nullptr));
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_GT(info->id, last_id);
      last_id = info->id;
    }
    const auto all = (*store)->List();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].id, last_id);
    EXPECT_EQ(all[1].id, last_id - 1);
    EXPECT_EQ(all[0].digest, source.Stats().digest);
  }
}

// Damage the newest checkpoint's file: the store falls back to the previous.
void DamageNewest(const std::string& db, bool truncate) {
  const auto files = SstFiles(db);
  ASSERT_FALSE(files.empty());
  const fs::path newest = files.back();
  const auto size = fs::file_size(newest);
  if (truncate) {
    fs::resize_file(newest, size / 2);
    return;
  }
  std::fstream file(newest, std::ios::in | std::ios::out | std::ios::binary);
  for (uint64_t at = size / 8; at < size / 2; at += 4096) {
    file.seekp(static_cast<std::streamoff>(at));
    file.write("garbage!", 8);
  }
}

TEST(CheckpointStoreTest, DamagedNewestFallsBackToThePrevious) {
  for (bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncated" : "garbled");
    TempDir dir;
    const std::string db = dir.path() + "/db";
    index::KvIndex source;
    uint64_t older_digest = 0, newer_id = 0;
    {
      auto store = CheckpointStore::Open(db);
      ASSERT_TRUE(store.ok());
      Fill(&source, 1, 2000);
      older_digest = source.Stats().digest;
      ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
      Fill(&source, 2, 4000);
      auto info = (*store)->Write(CaptureCheckpoint(source, nullptr));
      ASSERT_TRUE(info.ok());
      newer_id = info->id;
    }
    DamageNewest(db, truncate);
    auto store = CheckpointStore::Open(db);
    ASSERT_TRUE(store.ok()) << store.status();
    // The restore lands on the older one, and a half-restored newer one
    // leaves nothing behind.
    index::KvIndex restored;
    consume::AgentTable restored_agents;
    size_t skipped = 0;
    EXPECT_EQ(RestoreNewestInto(**store, &restored, &restored_agents, &skipped), newer_id - 1);
    EXPECT_EQ(skipped, 1u);
    EXPECT_EQ(restored.Stats().digest, older_digest);
    // And the next write works and becomes the newest.
    auto info = (*store)->Write(CaptureCheckpoint(source, nullptr));
    ASSERT_TRUE(info.ok()) << info.status();
    index::KvIndex newest;
    EXPECT_EQ(RestoreNewestInto(**store, &newest), info->id);
    EXPECT_EQ(newest.Stats().digest, source.Stats().digest);
  }
}

// The stream's identity travels with the checkpoint (manifest version 3),
// through Export/Import too, and RestoreNewest skips a checkpoint its
// `accept` refuses (the router refuses one of another stream or past its
// end) without touching the index.
TEST(CheckpointStoreTest, StreamIdentityRoundTripsAndRefusalSkips) {
  TempDir dir;
  index::KvIndex source;
  Fill(&source, 5, 500);
  CheckpointImage image = CaptureCheckpoint(source, nullptr);
  image.stream = "KVINDEX";
  image.stream_created_ns = 1'700'000'000'123'456'789;
  auto store = CheckpointStore::Open(dir.path() + "/a");
  ASSERT_TRUE(store.ok());
  auto written = (*store)->Write(image);
  ASSERT_TRUE(written.ok()) << written.status();
  const std::vector<CheckpointInfo> listed = (*store)->List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].stream, "KVINDEX");
  EXPECT_EQ(listed[0].stream_created_ns, 1'700'000'000'123'456'789);
  auto exported = (*store)->Export(written->id);
  ASSERT_TRUE(exported.ok());
  auto other = CheckpointStore::Open(dir.path() + "/b");
  ASSERT_TRUE(other.ok());
  auto imported = (*other)->Import(*exported);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->stream, "KVINDEX");
  EXPECT_EQ(imported->stream_created_ns, 1'700'000'000'123'456'789);

  index::KvIndex refused_into;
  uint64_t id = 0;
  size_t skipped = 0;
  auto none =
      RestoreNewest(**other, &refused_into, nullptr, &id, &skipped, [](const CheckpointInfo& info) {
        return info.stream_created_ns == 42 ? absl::OkStatus()
                                            : absl::AbortedError("another stream");
      });
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(skipped, 1u);
  EXPECT_EQ(refused_into.Stats().applied_seq, 0u);
  index::KvIndex accepted_into;
  auto restored = RestoreNewest(**other, &accepted_into, nullptr, &id, &skipped,
                                [](const CheckpointInfo&) { return absl::OkStatus(); });
  ASSERT_TRUE(restored.ok() && restored->has_value());
  EXPECT_EQ(accepted_into.Stats().digest, source.Stats().digest);
}

// [new, damaged, older good] with keep = 2: the damaged one does not count,
// so the older good one stays as the fallback (it used to be pruned, leaving
// nothing to fall back to once the newest failed too).
TEST(CheckpointStoreTest, PruneKeepsAGoodFallbackPastADamagedCheckpoint) {
  for (bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncated" : "garbled");
    TempDir dir;
    const std::string db = dir.path() + "/db";
    index::KvIndex source;
    uint64_t good_id = 0, good_digest = 0;
    {
      auto store = CheckpointStore::Open(db, {.keep = 2});
      ASSERT_TRUE(store.ok());
      Fill(&source, 1, 2000);
      good_digest = source.Stats().digest;
      auto good = (*store)->Write(CaptureCheckpoint(source, nullptr));
      ASSERT_TRUE(good.ok());
      good_id = good->id;
      Fill(&source, 2, 4000);
      ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
    }
    DamageNewest(db, truncate);
    {
      auto store = CheckpointStore::Open(db, {.keep = 2});
      ASSERT_TRUE(store.ok()) << store.status();
      Fill(&source, 3, 500);
      ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
      std::vector<uint64_t> ids;
      for (const CheckpointInfo& info : (*store)->List()) ids.push_back(info.id);
      EXPECT_NE(std::find(ids.begin(), ids.end(), good_id), ids.end())
          << "the only good fallback was pruned";
      // A second write prunes what is now older than two good ones.
      ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
      ids.clear();
      for (const CheckpointInfo& info : (*store)->List()) ids.push_back(info.id);
      EXPECT_EQ(std::find(ids.begin(), ids.end(), good_id), ids.end());
    }
    // Back to [new, damaged, older good]: the newest damaged as well, the
    // restore lands on the good one.
    TempDir dir2;
    const std::string db2 = dir2.path() + "/db";
    {
      auto store = CheckpointStore::Open(db2, {.keep = 2});
      ASSERT_TRUE(store.ok());
      ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
      good_digest = source.Stats().digest;
      good_id = (*store)->List()[0].id;
      Fill(&source, 4, 300);
      ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
    }
    DamageNewest(db2, truncate);
    {
      auto store = CheckpointStore::Open(db2, {.keep = 2});
      ASSERT_TRUE(store.ok());
      Fill(&source, 5, 300);
      ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
    }
    DamageNewest(db2, truncate);
    auto store = CheckpointStore::Open(db2, {.keep = 2});
    ASSERT_TRUE(store.ok()) << store.status();
    index::KvIndex restored;
    EXPECT_EQ(RestoreNewestInto(**store, &restored), good_id);
    EXPECT_EQ(restored.Stats().digest, good_digest);
  }
}

// Ingest states (embedded routers) travel with the checkpoint, in pieces,
// and a missing piece makes the checkpoint unusable, not silently partial.
TEST(CheckpointStoreTest, IngestStatesRoundTripAndAreVerified) {
  TempDir dir;
  const std::string db = dir.path() + "/db";
  index::KvIndex source;
  Fill(&source, 5, 300);
  CheckpointImage image = CaptureCheckpoint(source, nullptr);
  std::mt19937_64 rng(7);
  std::string big(format::kChunkBytes * 2 + 12345, '\0');
  for (char& c : big) c = static_cast<char>(rng());
  image.ingest = {{"worker=w0,pub=tcp://a", big},
                  {"worker=w1,pub=tcp://b", ""},
                  {"worker=w2,pub=tcp://c", "xyz"}};
  uint64_t id = 0;
  {
    auto store = CheckpointStore::Open(db);
    ASSERT_TRUE(store.ok());
    auto info = (*store)->Write(image);
    ASSERT_TRUE(info.ok()) << info.status();
    id = info->id;
    auto loaded = (*store)->Load(id);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->ingest, image.ingest);
    index::KvIndex restored;
    uint64_t restored_id = 0;
    size_t skipped = 0;
    auto manifest = RestoreNewest(**store, &restored, nullptr, &restored_id, &skipped);
    ASSERT_TRUE(manifest.ok() && manifest->has_value());
    EXPECT_EQ((*manifest)->ingest, image.ingest);
    EXPECT_EQ(restored.Stats().digest, source.Stats().digest);
  }
  {
    // The second piece of the first state goes missing.
    rocksdb::DB* raw = nullptr;
    rocksdb::Options options;
    ASSERT_TRUE(rocksdb::DB::Open(options, db, &raw).ok());
    std::unique_ptr<rocksdb::DB> rdb(raw);
    ASSERT_TRUE(rdb->Delete(rocksdb::WriteOptions(), format::IngestKey(id, 0, 1)).ok());
  }
  auto store = CheckpointStore::Open(db);
  ASSERT_TRUE(store.ok());
  auto loaded = (*store)->Load(id);
  EXPECT_TRUE(absl::IsDataLoss(loaded.status())) << loaded.status();
  index::KvIndex restored;
  EXPECT_EQ(RestoreNewestInto(**store, &restored), 0u);
  EXPECT_EQ(restored.Stats().entries[0], 0u);
}

// A new replica bootstraps from a peer's exported checkpoint: the import is
// verified like any checkpoint; a damaged transfer leaves nothing behind.
TEST(CheckpointStoreTest, ExportImportBetweenReplicas) {
  TempDir dir;
  index::KvIndex source;
  Fill(&source, 11, 2000);
  consume::AgentTable agents;
  FillAgents(agents);
  CheckpointImage image = CaptureCheckpoint(source, &agents);
  image.ingest = {{"worker=w0", "state"}};
  auto peer = CheckpointStore::Open(dir.path() + "/peer");
  ASSERT_TRUE(peer.ok());
  auto written = (*peer)->Write(image);
  ASSERT_TRUE(written.ok());
  auto exported = (*peer)->Export(written->id);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_TRUE(absl::IsNotFound((*peer)->Export(written->id + 7).status()));

  auto fresh = CheckpointStore::Open(dir.path() + "/fresh");
  ASSERT_TRUE(fresh.ok());
  // Damaged in transfer: one flipped byte, or cut short.
  std::string damaged = *exported;
  damaged[damaged.size() / 2] ^= 0x20;
  EXPECT_TRUE(absl::IsDataLoss((*fresh)->Import(damaged).status()));
  EXPECT_TRUE(absl::IsDataLoss((*fresh)->Import(exported->substr(0, 100)).status()));
  EXPECT_TRUE((*fresh)->List().empty());

  auto imported = (*fresh)->Import(*exported);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->applied_seq, written->applied_seq);
  EXPECT_EQ(imported->digest, source.Stats().digest);
  index::KvIndex restored;
  consume::AgentTable restored_agents;
  uint64_t id = 0;
  size_t skipped = 0;
  auto manifest = RestoreNewest(**fresh, &restored, &restored_agents, &id, &skipped);
  ASSERT_TRUE(manifest.ok() && manifest->has_value());
  EXPECT_EQ(id, imported->id);
  EXPECT_EQ(Entries(restored), Entries(source));
  EXPECT_EQ((*manifest)->ingest, image.ingest);
  ExpectSameAgents(restored_agents, agents);
}

// A database at `db` holding one checkpoint.
void WriteOneCheckpoint(const std::string& db) {
  auto store = CheckpointStore::Open(db);
  ASSERT_TRUE(store.ok());
  index::KvIndex source;
  Fill(&source, 1, 100);
  ASSERT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
}

// Whether `dir` holds a database moved aside (db.damaged-<time>).
bool MovedAside(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("db.damaged-", 0) == 0) return true;
  }
  return false;
}

TEST(CheckpointStoreTest, UnopenableDatabaseIsMovedAside) {
  TempDir dir;
  const std::string db = dir.path() + "/db";
  WriteOneCheckpoint(db);
  for (const auto& entry : fs::directory_iterator(db)) {
    if (entry.path().filename().string().rfind("MANIFEST-", 0) == 0) {
      std::ofstream(entry.path(), std::ios::trunc) << "not a manifest";
    }
  }
  // Inspection does not change anything...
  EXPECT_FALSE(CheckpointStore::Open(db, {.read_only = true}).ok());
  EXPECT_FALSE(CheckpointStore::Open(db).ok());
  // ... a router moves it aside and starts afresh.
  auto store = CheckpointStore::Open(db, {.quarantine_damaged = true});
  ASSERT_TRUE(store.ok()) << store.status();
  index::KvIndex restored;
  EXPECT_EQ(RestoreNewestInto(**store, &restored), 0u);
  EXPECT_TRUE(MovedAside(dir.path()));
}

// Reproduction (issue #21): a CURRENT file naming a MANIFEST that does not
// exist made every open (so every checkpoint) fail forever; it is moved aside
// as docs/operations.md says.
TEST(CheckpointStoreTest, CurrentNamingAMissingManifestIsMovedAside) {
  TempDir dir;
  const std::string db = dir.path() + "/db";
  WriteOneCheckpoint(db);
  std::ofstream(db + "/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
  EXPECT_FALSE(CheckpointStore::Open(db, {.read_only = true}).ok());
  auto store = CheckpointStore::Open(db, {.quarantine_damaged = true});
  ASSERT_TRUE(store.ok()) << store.status();
  index::KvIndex source;
  Fill(&source, 2, 50);
  EXPECT_TRUE((*store)->Write(CaptureCheckpoint(source, nullptr)).ok());
  EXPECT_TRUE(MovedAside(dir.path()));
}

TEST(CheckpointStoreTest, GarbledManifestAndChunksAreErrorsNotCrashes) {
  index::KvIndex source;
  Fill(&source, 5, 300);
  consume::AgentTable agents;
  FillAgents(agents);
  const CheckpointImage image = CaptureCheckpoint(source, &agents);
  const auto chunks = format::EncodeChunks(image);
  const std::string manifest = format::EncodeManifest(image, chunks.size(), 0);
  ASSERT_TRUE(format::DecodeManifest(manifest).ok());
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string bad = manifest.substr(0, rng() % manifest.size());
    EXPECT_FALSE(format::DecodeManifest(bad).ok());
    std::string flipped = manifest;
    flipped[rng() % flipped.size()] ^= static_cast<char>(1 + rng() % 255);
    EXPECT_FALSE(format::DecodeManifest(flipped).ok());
    // Chunks carry no checksum of their own (RocksDB's block checksums and
    // the digest catch damage): a garbled chunk must only never crash.
    auto m = format::DecodeManifest(manifest);
    CheckpointImage into = m->image;
    std::string chunk = chunks[0].substr(0, rng() % chunks[0].size());
    if (!chunk.empty()) chunk[rng() % chunk.size()] ^= static_cast<char>(rng());
    if (format::DecodeChunk(chunk, &into).ok()) {
      EXPECT_FALSE(into.Verify().ok());
    }
  }
}

// A chunk whose first run is empty (model 0, source 0, tier 0, 0 hashes):
// decoded into empty vectors it copied 0 bytes to a null pointer
// (undefined behaviour, reported by UBSan in the asan stage; found by
// tests/fuzz/checkpoint_reader_fuzz). It decodes to one empty run.
TEST(CheckpointStoreTest, ChunkWithAnEmptyFirstRunDecodes) {
  const std::string chunk("\x00\x00\x00\x00", 4);
  std::vector<CheckpointRun> runs;
  std::vector<uint64_t> hashes;
  ASSERT_TRUE(format::DecodeChunk(chunk, 1, 1, &runs, &hashes).ok());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].begin, runs[0].end);
  EXPECT_TRUE(hashes.empty());
}

// A manifest's per-model `blocks` is a sizing hint read before anything is
// verified: a damaged or hostile one (a peer's export carries its own
// checksum) made the restore reserve that many blocks, a huge index mapped
// for a few entries (found by tests/fuzz/checkpoint_reader_fuzz: a 23 s
// timeout). The reservation is bounded by what the data can hold, in
// memory and streamed from the store.
TEST(CheckpointStoreTest, HugeBlockHintsReserveNoMoreThanTheDataHolds) {
  index::KvIndex source;
  Fill(&source, 3, 200);
  CheckpointImage image = CaptureCheckpoint(source, nullptr);
  ASSERT_GT(image.total_entries(), 0u);
  for (CheckpointModel& model : image.models) model.blocks = uint64_t{1} << 22;
  auto expect_small = [&](const index::KvIndex& index) {
    EXPECT_EQ(index.Stats().digest, source.Stats().digest);
    for (const CheckpointModel& model : image.models) {
      const auto profile = index.ProfileLocator(model.name, /*histograms=*/false);
      ASSERT_TRUE(profile.has_value()) << model.name;
      EXPECT_LT(profile->capacity, uint64_t{1} << 20) << model.name << ": the hint was trusted";
    }
  };
  index::KvIndex in_memory;
  ASSERT_TRUE(RestoreCheckpoint(image, &in_memory, nullptr).ok());
  expect_small(in_memory);

  TempDir dir;
  auto store = CheckpointStore::Open(dir.path() + "/db");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Write(image).ok());
  index::KvIndex streamed;
  ASSERT_NE(RestoreNewestInto(**store, &streamed), 0u);
  expect_small(streamed);
  auto loaded = (*store)->Load((*store)->List().front().id, /*verify_digest=*/true);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->hashes.size(), image.total_entries());
}

// A KvIndex whose captures hold their reader after the first run until
// released: what a slow disk does to a checkpoint's write.
class HeldCaptureIndex final : public index::IndexInterface {
 public:
  std::promise<void> reading;
  std::promise<void> release;

  index::ApplyResult ApplyMessage(std::span<const PlacementEvent> events,
                                  uint64_t position) override {
    return inner_.ApplyMessage(events, position);
  }
  StatusOr<index::MatchResult> MatchSequenceHashes(
      std::string_view model, std::span<const uint64_t> seq,
      const index::MatchOptions& options) const override {
    return inner_.MatchSequenceHashes(model, seq, options);
  }
  std::optional<uint32_t> BlockSize(std::string_view model) const override {
    return inner_.BlockSize(model);
  }
  std::vector<std::string> Models() const override { return inner_.Models(); }
  index::IndexStats Stats() const override { return inner_.Stats(); }
  std::vector<index::SourceInfo> Sources() const override { return inner_.Sources(); }
  void ForEachEntry(const EntryVisitor& fn) const override { inner_.ForEachEntry(fn); }
  void RestoreEntry(std::string_view model, const SourceKey& source, Tier tier, uint64_t hash,
                    uint32_t block_size) override {
    inner_.RestoreEntry(model, source, tier, hash, block_size);
  }
  void RestoreAppliedSeq(uint64_t position) override { inner_.RestoreAppliedSeq(position); }
  void set_departure_observer(index::DepartureObserver* observer) override {
    inner_.set_departure_observer(observer);
  }
  StatusOr<std::unique_ptr<index::IndexCapture>> BeginCapture() const override {
    KVINDEX_ASSIGN_OR_RETURN(std::unique_ptr<index::IndexCapture> inner, inner_.BeginCapture());
    return std::unique_ptr<index::IndexCapture>(
        std::make_unique<Held>(std::move(inner), const_cast<HeldCaptureIndex*>(this)));
  }

 private:
  class Held final : public index::IndexCapture {
   public:
    Held(std::unique_ptr<index::IndexCapture> inner, HeldCaptureIndex* owner)
        : inner_(std::move(inner)), owner_(owner) {
      stats_ = inner_->stats();
      models_ = inner_->models();
    }
    void ForEachRun(const RunVisitor& fn) override {
      bool first = true;
      std::shared_future<void> released = owner_->release.get_future().share();
      inner_->ForEachRun(
          [&](uint32_t model, uint32_t source, Tier tier, std::span<const uint64_t> hashes) {
            if (first) {
              first = false;
              owner_->reading.set_value();
              released.wait();
            }
            fn(model, source, tier, hashes);
          });
    }

   private:
    std::unique_ptr<index::IndexCapture> inner_;
    HeldCaptureIndex* owner_;
  };
  index::KvIndex inner_;
};

PlacementEvent AgentStored(std::string worker, std::vector<uint64_t> hashes) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "m";
  e.source = {std::move(worker), 0};
  e.agent = "node-a";
  e.block_size = 16;
  e.block_hashes = std::move(hashes);
  return e;
}

// Issue #26.8: apply is paused only while a checkpoint's capture opens, not
// while it is read and written: a message applied while the checkpointer is
// held inside the capture reaches the index, and the checkpoint holds the
// state of the capture's position, not the later one.
TEST(CheckpointerTest, ApplyGoesOnWhileTheCheckpointIsRead) {
  TempDir dir;
  InProcessSink sink;
  consume::InProcessLogReader log(&sink);
  HeldCaptureIndex index;
  consume::RouterProbe probe;
  consume::ApplyLoop apply(&log, &index, &probe, {});
  ASSERT_TRUE(apply.Start().ok());
  auto wait_for = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  };
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{AgentStored("w0", {1, 2, 3})}).ok());
  ASSERT_TRUE(wait_for([&] { return index.Stats().applied_seq == 1; }));
  const uint64_t captured_digest = index.Stats().digest;

  CheckpointerOptions options;
  options.dir = dir.path() + "/checkpoints";
  options.interval = std::chrono::milliseconds(0);
  auto checkpointer = std::make_unique<Checkpointer>(options, &apply, &index, nullptr);
  Status written;
  std::thread writer([&] { written = checkpointer->WriteNow(); });
  const bool reading =
      index.reading.get_future().wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{AgentStored("w1", {4, 5})}).ok());
  const bool went_on = wait_for([&] { return index.Stats().applied_seq == 2; });
  index.release.set_value();
  writer.join();
  apply.Stop();
  ASSERT_TRUE(reading) << "the checkpoint never read its capture";
  EXPECT_TRUE(went_on) << "apply was blocked while the checkpoint was being read";
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ(checkpointer->last_good_applied_seq(), 1u);
  checkpointer.reset();  // closes the database

  index::KvIndex restored;
  auto store = CheckpointStore::Open(options.dir);
  ASSERT_TRUE(store.ok());
  uint64_t id = 0;
  size_t skipped = 0;
  auto image = RestoreNewest(**store, &restored, nullptr, &id, &skipped);
  ASSERT_TRUE(image.ok() && image->has_value());
  EXPECT_EQ(restored.Stats().applied_seq, 1u);
  EXPECT_EQ(restored.Stats().digest, captured_digest);
  EXPECT_NE(index.Stats().digest, captured_digest);
}

// #25: the checkpoint directory deleted under a running router (an
// operator, a cleanup job) left every later checkpoint failing ("No such
// file or directory") until a restart. The next checkpoint reopens the
// database and is written, even with nothing applied since the last one.
TEST(CheckpointerTest, ADeletedDirectoryIsRecreatedByTheNextCheckpoint) {
  TempDir dir;
  InProcessSink sink;
  consume::InProcessLogReader log(&sink);
  index::KvIndex index;
  consume::ApplyLoop apply(&log, &index, nullptr, {});
  ASSERT_TRUE(apply.Start().ok());
  auto applied = [&](uint64_t seq) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (index.Stats().applied_seq < seq && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return index.Stats().applied_seq == seq;
  };
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{AgentStored("w0", {1, 2, 3})}).ok());
  ASSERT_TRUE(applied(1));
  CheckpointerOptions options;
  options.dir = dir.path() + "/checkpoints";
  options.interval = std::chrono::milliseconds(0);
  auto checkpointer = std::make_unique<Checkpointer>(options, &apply, &index, nullptr);
  ASSERT_TRUE(checkpointer->WriteNow().ok());

  std::filesystem::remove_all(options.dir);
  std::filesystem::remove_all(options.dir + ".ingest");
  Status written = checkpointer->WriteNow();  // nothing applied since
  EXPECT_TRUE(written.ok()) << written;
  EXPECT_TRUE(std::filesystem::exists(options.dir + "/CURRENT"));
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{AgentStored("w1", {4, 5})}).ok());
  ASSERT_TRUE(applied(2));
  written = checkpointer->WriteNow();
  EXPECT_TRUE(written.ok()) << written;
  EXPECT_EQ(checkpointer->failures(), 0u);
  uint64_t exported_seq = 0;
  EXPECT_TRUE(checkpointer->ExportNewest(&exported_seq).ok());
  EXPECT_EQ(exported_seq, 2u);
  apply.Stop();
  checkpointer.reset();

  index::KvIndex restored;
  auto store = CheckpointStore::Open(options.dir);
  ASSERT_TRUE(store.ok());
  uint64_t id = 0;
  size_t skipped = 0;
  auto image = RestoreNewest(**store, &restored, nullptr, &id, &skipped);
  ASSERT_TRUE(image.ok() && image->has_value());
  EXPECT_EQ(restored.Stats().applied_seq, 2u);
  EXPECT_EQ(restored.Stats().digest, index.Stats().digest);
}

}  // namespace
}  // namespace kvindex::storage
