// CheckpointImage: the router's replicated state at one log position, in
// memory: every entry of the index (as runs of hashes per model, source and
// tier), each model's block size, the applied position, the digest, and the
// AgentTable (sender sequencing and liveness). The router does not hold it
// whole: it opens a capture of the index on the writer thread (a pause that
// copies one pointer per node) and CheckpointStore::WriteCapture reads the
// entries from it on another thread, while apply goes on. Verified and
// loaded at restart.
//
//   CheckpointImage image = CaptureCheckpoint(index, &agents);  // writer thread (tests)
//   KVINDEX_RETURN_IF_ERROR(image.Verify());                   // digest from the runs
//   KVINDEX_RETURN_IF_ERROR(RestoreCheckpoint(image, &fresh_index, &agents));
//
// Thread safety: a value type; Capture and Restore follow the index's
// writer-thread rule.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shared/base/status.h"
#include "shared/consume/agent_table.h"
#include "shared/index/index_interface.h"
#include "shared/model/source_key.h"
#include "shared/model/tier.h"

namespace kvindex::storage {

struct CheckpointModel {
  std::string name;
  uint32_t block_size = 0;
  uint64_t blocks = 0;  // distinct blocks (a sizing hint for the restore)
  friend bool operator==(const CheckpointModel&, const CheckpointModel&) = default;
};

// hashes[begin, end) held by sources[source] of models[model] in `tier`.
struct CheckpointRun {
  uint32_t model = 0;
  uint32_t source = 0;
  Tier tier = Tier::kDevice;
  uint64_t begin = 0, end = 0;
  friend bool operator==(const CheckpointRun&, const CheckpointRun&) = default;
};

// The saved state of one ingest source of kvindex-router --embedded, taken
// at the same log position as the index (opaque here: the ingest side writes
// and reads it), so after a restart the source continues from its engine
// sequence instead of clearing and replaying from seq 0.
struct CheckpointIngestSource {
  std::string key;    // the source's spec
  std::string state;  // ingest::SourceSession::SaveState
  friend bool operator==(const CheckpointIngestSource&, const CheckpointIngestSource&) = default;
};

struct CheckpointImage {
  uint64_t applied_seq = 0;
  uint64_t digest = 0;  // IndexStats::digest at applied_seq
  uint64_t entries[kNumTiers] = {};
  uint64_t created_unix_ms = 0;
  std::vector<CheckpointModel> models;
  std::vector<SourceKey> sources;
  std::vector<CheckpointRun> runs;
  std::vector<uint64_t> hashes;
  std::vector<consume::AgentTable::AgentView> agents;
  // Empty unless captured with the ingest paused (embedded routers).
  std::vector<CheckpointIngestSource> ingest;
  // The log this state was applied from: the JetStream stream's name and
  // creation time (ns since the epoch), so a checkpoint is never restored
  // onto another stream (another cluster's, or one wiped and recreated).
  // Empty / 0: unknown (embedded routers, checkpoints before version 3).
  std::string stream;
  int64_t stream_created_ns = 0;
  // The router's SGLang alias map (opaque here: AliasCheckpoint in
  // checkpointer.h saves and restores it), captured at the same log
  // position as the index. Unset: the router keeps none, or the checkpoint
  // predates version 6 (restored as an empty map).
  std::optional<std::string> aliases;

  uint64_t total_entries() const;
  std::span<const uint64_t> Hashes(const CheckpointRun& run) const {
    return std::span<const uint64_t>(hashes).subspan(run.begin, run.end - run.begin);
  }
  // Recomputes the digest and the per-tier counts from the runs and compares
  // them with the recorded ones: DataLoss when they differ (a damaged file),
  // before anything reaches an index.
  Status Verify() const;
};

// The parts of a checkpoint that are not the index's (the agent table,
// the time), for CheckpointStore::WriteCapture. Writer thread; `agents`
// may be null.
CheckpointImage CaptureManifest(const consume::AgentTable* agents);
// The whole state copied into memory (tests, kvindex-ctl; the router
// writes from an open capture instead). Writer thread (or a quiescent
// index). `agents` may be null.
CheckpointImage CaptureCheckpoint(const index::IndexInterface& index,
                                  const consume::AgentTable* agents);

// Restores a checkpoint piece by piece (a loader streams its chunks while
// the writer thread restores them): Begin with the manifest (an image
// without runs), Add the runs of each chunk in order, then Finish, which
// checks the restored digest. Abort (or a failed Finish) takes every
// restored entry back out: fail closed, the index is empty again.
class CheckpointRestorer {
 public:
  // `max_entries`: the most entries the checkpoint's data can hold (its
  // bytes / 8). The manifest's per-model `blocks` hints are not verified
  // before the restore, so the index is reserved at most that many blocks
  // (and at most the manifest's entry count) across all models; it grows
  // past that as entries actually arrive.
  static StatusOr<CheckpointRestorer> Begin(const CheckpointImage& manifest,
                                            index::IndexInterface* index, uint64_t max_entries);
  // `runs` index into `hashes`.
  void Add(std::span<const CheckpointRun> runs, std::span<const uint64_t> hashes);
  Status Finish(consume::AgentTable* agents,
                std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  void Abort();

 private:
  CheckpointRestorer(const CheckpointImage& manifest, index::IndexInterface* index)
      : manifest_(&manifest), index_(index), has_entries_(manifest.models.size(), false) {}

  const CheckpointImage* manifest_;
  index::IndexInterface* index_;
  std::vector<bool> has_entries_;
};

// Loads `image` into an EMPTY index (and the agent table, when not null) and
// checks the index's digest afterwards: on a mismatch every restored entry
// is taken back out (the index is empty again, models stay known) and
// DataLoss is returned. Writer thread.
Status RestoreCheckpoint(
    const CheckpointImage& image, index::IndexInterface* index, consume::AgentTable* agents,
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

}  // namespace kvindex::storage
