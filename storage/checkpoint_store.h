// CheckpointStore: checkpoints of the router's state in a RocksDB database
// (checkpoint_format.h for the keys and values).
//
// A checkpoint is written as one SST file (SstFileWriter) and ingested in
// one atomic, durable step: after a crash at any moment a checkpoint is
// either complete or absent, never half there. Each checkpoint lives in its
// own file, so damage to one leaves the others readable: Load verifies the
// manifest checksum, RocksDB's block checksums and the state digest, and
// a restore (storage::RestoreNewest, checkpointer.h) falls back to the
// previous checkpoint. Old checkpoints are
// removed with one DeleteRange (the newest `keep` stay).
//
//   KVINDEX_ASSIGN_OR_RETURN(auto store, CheckpointStore::Open(dir));
//   KVINDEX_ASSIGN_OR_RETURN(CheckpointInfo info, store->Write(image));
//   KVINDEX_ASSIGN_OR_RETURN(CheckpointImage loaded, store->Load(info.id));
//
// A database that does not open (its MANIFEST or CURRENT damaged) is moved
// aside to `<dir>.damaged-<unix time>` when OpenOptions::quarantine_damaged
// is set, and a new one is created: the router then starts from the log.
//
// Thread safety: Write and Prune from one thread at a time; List and Load
// from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/base/status.h"
#include "storage/checkpoint_image.h"

namespace rocksdb {
class DB;
class Env;
}  // namespace rocksdb

namespace kvindex::storage {
namespace internal {
class StickyErrorFileSystem;
}
namespace format {
class ChunkWriter;
}

struct CheckpointInfo {
  uint64_t id = 0;
  uint64_t applied_seq = 0;
  uint64_t digest = 0;
  uint64_t entries[kNumTiers] = {};
  uint64_t created_unix_ms = 0;
  uint64_t chunks = 0;
  uint64_t bytes = 0;  // data chunks + manifest, before RocksDB's own overhead
  std::vector<CheckpointModel> models;
  size_t sources = 0;
  size_t agents = 0;
  // The stream the state came from (CheckpointImage::stream).
  std::string stream;
  int64_t stream_created_ns = 0;
  Status manifest_status;  // not OK: the manifest did not decode
};

struct CheckpointStoreOptions {
  // Checkpoints kept after a write (the newest; >= 1). Default: 2.
  size_t keep = 2;
  // Move an unopenable database aside and start a new one. Default: false
  // (inspection must not change anything).
  bool quarantine_damaged = false;
  // Open read-only (kvindex-ctl checkpoint inspect). Default: false.
  bool read_only = false;
};

class CheckpointStore {
 public:
  static StatusOr<std::unique_ptr<CheckpointStore>> Open(const std::string& dir,
                                                         CheckpointStoreOptions options = {});
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Writes `image` as the newest checkpoint, then prunes. Errors (disk full,
  // read-only directory) leave the previous checkpoints as they were.
  StatusOr<CheckpointInfo> Write(const CheckpointImage& image);
  // The same from an open capture (IndexInterface::BeginCapture), read as
  // it is written (the entries are never copied whole): `manifest` gives
  // the agents, ingest states and stream, the capture the rest. Checks that
  // what it read adds up to the capture's digest and counts (Internal when
  // not: nothing is written). Ends the capture's reading.
  StatusOr<CheckpointInfo> WriteCapture(CheckpointImage manifest, index::IndexCapture* capture);
  // Every checkpoint with a manifest, newest first.
  std::vector<CheckpointInfo> List() const;
  // Reads one checkpoint and checks its structure (chunks, counts, bounds)
  // and, with `verify_digest`, recomputes its digest (CheckpointImage::Verify;
  // a restore checks the digest anyway, so a router skips this pass).
  StatusOr<CheckpointImage> Load(uint64_t id, bool verify_digest = true) const;
  // Streams one checkpoint: *manifest (models, sources, agents, counts; no
  // runs) is filled first, then `on_chunk` gets each data chunk's runs and
  // hashes in order (its runs index into its own hashes). Stops at the first
  // error, its own or on_chunk's.
  Status Stream(uint64_t id, CheckpointImage* manifest,
                const std::function<Status(std::vector<CheckpointRun>&& runs,
                                           std::vector<uint64_t>&& hashes)>& on_chunk) const;
  // Keeps the newest `keep` checkpoints that read back whole (a damaged one
  // does not count) and anything newer; removes the rest. Reads an older
  // checkpoint this process did not write once, to know it is whole.
  Status Prune(size_t keep);

  // Every record of checkpoint `id` as one self-checking blob (XXH3 over it),
  // for a new replica to bootstrap from (GET /v1/checkpoint). Any thread.
  StatusOr<std::string> Export(uint64_t id) const;
  // A peer's exported checkpoint, written here as the newest and verified
  // like any other (digest included); DataLoss when it does not verify (then
  // nothing of it stays). Writer thread (like Write).
  StatusOr<CheckpointInfo> Import(std::string_view exported);

  const std::string& dir() const { return dir_; }
  // Bytes of the database's files on disk.
  uint64_t DiskBytes() const;

 private:
  CheckpointStore(std::string dir, CheckpointStoreOptions options, std::unique_ptr<rocksdb::DB> db);
  using Records = std::vector<std::pair<std::string, std::string>>;
  // Writes the checkpoint `runs` feeds (about `data` bytes of run records)
  // with *manifest (whose sources `runs` may fill), then prunes.
  StatusOr<CheckpointInfo> WriteRuns(CheckpointImage* manifest, uint64_t data,
                                     const std::function<Status(format::ChunkWriter*)>& runs);
  using PutRecord = std::function<Status(std::string_view key, std::string_view value)>;
  using RecordSource = std::function<Status(const PutRecord& put)>;
  // One SST of the records `records` puts (sorted keys of checkpoint `id`,
  // about `data` bytes, checked against the free space), ingested
  // atomically.
  Status WriteRecords(uint64_t id, uint64_t data, const RecordSource& records);
  // Writer: `info`'s manifest decodes and its data reads back whole.
  bool Intact(const CheckpointInfo& info);

  const std::string dir_;
  const CheckpointStoreOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::shared_ptr<internal::StickyErrorFileSystem> sticky_fs_;  // for checkpoint files
  std::unique_ptr<rocksdb::Env> writer_env_;
  uint64_t next_id_ = 1;
  std::set<uint64_t> intact_;  // writer only: checkpoints known to read back whole
};

}  // namespace kvindex::storage
