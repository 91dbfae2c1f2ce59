// Checkpointer: the router's periodic checkpoints and its restart from them.
//
// Restore (before the apply loop starts) loads the newest checkpoint that
// verifies into the empty index and the agent table; the apply loop then
// opens the log at applied_seq + 1. Every `interval` (and once more at a
// clean shutdown, through WriteNow) a capture of the state is opened on the
// apply thread (apply pauses while it copies one pointer per node; lookups
// never wait: the index's readers are lock-free) and read and written on
// this thread while apply goes on (IndexInterface::BeginCapture). A checkpoint
// is skipped when nothing was applied since the last one.
//
// A failed write (disk full, read-only or vanished directory) is logged
// (rate-limited), counted in kvindex_checkpoint_failures_total and retried
// at the next interval; the router keeps serving from memory, and the
// previous checkpoints stay as they were. A database that cannot be opened
// is retried the same way. A database whose directory was deleted under
// the router (its CURRENT file gone) is reopened, new and empty, by the next
// checkpoint, which is written there (logged as an error).
//
//   Checkpointer checkpointer(options, &apply, &index, registry.get());
//   KVINDEX_RETURN_IF_ERROR(checkpointer.Restore(&index, &apply.agents()));
//   apply.Start(); checkpointer.Start();
//   ... checkpointer.Stop(); apply.Stop(); checkpointer.WriteNow();
//
// Thread safety: Restore/Start/Stop/WriteNow from the controlling thread;
// the accessors from any thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/base/stop_signal.h"
#include "shared/consume/apply_loop.h"
#include "shared/index/index_interface.h"
#include "shared/log/log.h"
#include "storage/checkpoint_store.h"

namespace kvindex::storage {

// The log a router applies: the JetStream stream's name, creation time and
// current last position (GetStreamInfo).
struct StreamIdentity {
  std::string name;
  int64_t created_ns = 0;
  uint64_t last_seq = 0;
};

struct CheckpointerOptions {
  // The RocksDB database directory (the router uses <data-dir>/checkpoints).
  std::string dir;
  // Time between checkpoints; 0 = only WriteNow. Default: 10 s.
  std::chrono::milliseconds interval{10000};
  // Checkpoints kept. Default: 2 (the newest and one to fall back to).
  size_t keep = 2;
  // The stream's identity now. Checkpoints record the identity seen at
  // Restore (or at the first write, when it was unknown then); Restore
  // refuses (logged, kvindex_checkpoint_refused_total{reason}) a checkpoint
  // from another stream (name or creation time differ: another cluster's, or
  // a stream wiped and recreated), one past the stream's end, and any with a
  // position when the stream does not exist (NotFound), so the router
  // rebuilds from the log instead of skipping positions it never applied.
  // Unavailable (NATS not answering): restored unchecked, with a WARN.
  // Null (embedded routers): no identity. Default: null.
  std::function<StatusOr<StreamIdentity>()> stream_identity;
};

// The ingest of kvindex-router --embedded, whose sources' states go into
// each checkpoint at the index's log position (so after a restart each
// source continues from its engine sequence instead of clearing).
class IngestCheckpoint {
 public:
  virtual ~IngestCheckpoint() = default;
  // Holds the sources between two engine batches and waits until the log
  // holds everything they published; false when that did not happen in
  // time (the checkpoint then goes without ingest states). Every Hold is
  // followed by one Release.
  virtual bool Hold() = 0;
  // While held, on the apply thread after the log is applied.
  virtual std::vector<CheckpointIngestSource> Save() = 0;
  virtual void Release() = 0;
};

// State derived from the log that a router keeps beside its index (the
// SGLang alias map, shared/compat/sglang_alias_map.h), checkpointed with
// it: saved at the index's log position, restored right after it.
class AliasCheckpoint {
 public:
  virtual ~AliasCheckpoint() = default;
  // On the apply thread, at the capture's position.
  virtual std::string Save() = 0;
  // Before the apply loop starts: replaces the state whole; "" = a
  // checkpoint without it (an empty state). An error (DataLoss) leaves the
  // state empty.
  virtual Status Restore(std::string_view state) = 0;
};

struct RestoreResult {
  // The restored checkpoint's ingest states (embedded routers; moved out by
  // the router to resume its sources).
  std::vector<CheckpointIngestSource> ingest;
  bool loaded = false;
  uint64_t id = 0;
  uint64_t applied_seq = 0;
  uint64_t entries = 0;
  double seconds = 0;
  size_t skipped = 0;  // newer checkpoints that did not verify
};

// Restores the newest checkpoint of `store` that loads and whose restored
// digest matches into the empty `index` (and `agents`, nullable), trying
// older ones after a failure (each logged and counted in *skipped). An
// empty optional when none could be restored (the index is empty then).
// The image returned holds the manifest only (no runs): the chunks are
// streamed from a second thread while they are restored.
// `accept` (nullable) vets each checkpoint before it is restored: a non-OK
// answer skips it (logged, counted in *skipped).
// `aliases` (nullable) is restored from each checkpoint's alias record
// after its index (empty without one); a record that does not restore
// makes the checkpoint unusable like a damaged chunk (the index is taken
// back out, an older one is tried). Empty when none restored.
StatusOr<std::optional<CheckpointImage>> RestoreNewest(
    const CheckpointStore& store, index::IndexInterface* index, consume::AgentTable* agents,
    uint64_t* id, size_t* skipped,
    const std::function<Status(const CheckpointInfo&)>& accept = nullptr,
    AliasCheckpoint* aliases = nullptr);

class Checkpointer {
 public:
  // `apply` and `index` must outlive this object; `registry` is nullable.
  Checkpointer(CheckpointerOptions options, consume::ApplyLoop* apply, index::IndexInterface* index,
               prometheus::Registry* registry);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Loads the newest good checkpoint into the (empty) index and `agents`.
  // Never fails for a missing, damaged or unreadable checkpoint (logged; the
  // router then starts from the log): only for a restore that went wrong
  // half-way, after which the index is no longer empty.
  StatusOr<RestoreResult> Restore(consume::AgentTable* agents);

  // Bootstrap of a new replica (kvindex-router --bootstrap-from): a peer's
  // exported checkpoint (CheckpointStore::Export) written here as the
  // newest, before Restore. Controlling thread.
  StatusOr<CheckpointInfo> Import(std::string_view exported);
  // True when the store holds a checkpoint (whether it verifies or not).
  bool HasCheckpoint();
  // The newest checkpoint that verifies, exported for a peer (GET
  // /v1/checkpoint); its position in *applied_seq. NotFound when there is
  // none yet. Any thread.
  StatusOr<std::string> ExportNewest(uint64_t* applied_seq) const;

  // Before Start; `ingest` (nullable) must outlive the checkpointer's use.
  void SetIngest(IngestCheckpoint* ingest) { ingest_ = ingest; }
  // Before Restore: the state kept beside the index (nullable).
  void SetAliases(std::shared_ptr<AliasCheckpoint> aliases) { aliases_ = std::move(aliases); }
  void Start();
  void Stop();
  // Captures and writes one checkpoint now (unless nothing changed).
  Status WriteNow();

  uint64_t last_good_applied_seq() const { return last_seq_.load(); }
  // Checkpoints Restore refused for their stream identity or position.
  uint64_t refused() const { return refused_.load(); }
  uint64_t failures() const { return failures_.load(); }
  // Longest apply pause a capture caused so far.
  std::chrono::nanoseconds longest_pause() const {
    return std::chrono::nanoseconds(longest_pause_ns_.load());
  }

 private:
  void Run();
  Status EnsureOpen();
  void Failed(const Status& status);
  void UpdateAge();

  const CheckpointerOptions options_;
  consume::ApplyLoop* const apply_;
  index::IndexInterface* const index_;
  // Checkpointer thread (or controlling, when stopped). Shared: a store
  // reopened after its directory vanished stays alive for an export that
  // still reads it.
  std::shared_ptr<CheckpointStore> store_;
  // The same store for other threads (ExportNewest): set once it is open.
  mutable Mutex shared_mu_;
  std::shared_ptr<const CheckpointStore> shared_store_ ABSL_GUARDED_BY(shared_mu_);
  IngestCheckpoint* ingest_ = nullptr;
  std::shared_ptr<AliasCheckpoint> aliases_;

  std::thread thread_;
  StopSignal stop_;

  std::atomic<uint64_t> last_seq_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> refused_{0};
  // The identity stamped on each checkpoint written (controlling thread in
  // Restore, then the checkpointer thread).
  std::optional<StreamIdentity> stream_;
  std::atomic<int64_t> longest_pause_ns_{0};
  std::chrono::steady_clock::time_point last_good_{};
  bool have_good_ = false;
  log::RateLimiter failure_log_{std::chrono::seconds(30)};

  prometheus::Histogram* duration_ = nullptr;
  prometheus::Histogram* pause_ = nullptr;
  prometheus::Gauge* bytes_ = nullptr;
  prometheus::Gauge* disk_bytes_ = nullptr;
  prometheus::Gauge* age_ = nullptr;
  prometheus::Gauge* applied_seq_ = nullptr;
  prometheus::Gauge* restore_seconds_ = nullptr;
  prometheus::Counter* writes_ = nullptr;
  prometheus::Family<prometheus::Counter>* failures_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* refused_family_ = nullptr;
};

}  // namespace kvindex::storage
