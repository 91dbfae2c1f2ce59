#include "storage/checkpointer.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "shared/base/mutex.h"

namespace kvindex::storage {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string FailureReason(const Status& status) {
  if (absl::IsResourceExhausted(status)) return "disk_full";
  if (absl::IsUnavailable(status) || absl::IsFailedPrecondition(status)) return "io";
  return "other";
}

uint64_t Entries(const CheckpointInfo& info) {
  uint64_t total = 0;
  for (uint64_t n : info.entries) total += n;
  return total;
}

}  // namespace

namespace {

// Chunks of one checkpoint handed from the loading thread to the restoring
// one, at most kMaxQueued (~1 MiB each) at a time.
class ChunkHandOff {
 public:
  struct Part {
    std::vector<CheckpointRun> runs;
    std::vector<uint64_t> hashes;
  };

  // Loader: the manifest is read (the first chunk is about to follow).
  void ManifestRead() {
    MutexLock lock(&mu_);
    manifest_ready_ = true;
    cv_.SignalAll();
  }
  // Loader: false when the restoring side gave up.
  bool Push(Part part) {
    MutexLock lock(&mu_);
    while (queue_.size() >= kMaxQueued && !stop_) cv_.Wait(&mu_);
    if (stop_) return false;
    queue_.push_back(std::move(part));
    cv_.SignalAll();
    return true;
  }
  // Loader: nothing more comes.
  void Done(Status status) {
    MutexLock lock(&mu_);
    load_status_ = std::move(status);
    manifest_ready_ = done_ = true;
    cv_.SignalAll();
  }

  // Restorer: waits for the manifest; an error when the load failed before.
  Status WaitManifest() {
    MutexLock lock(&mu_);
    while (!manifest_ready_) cv_.Wait(&mu_);
    return done_ ? load_status_ : absl::OkStatus();
  }
  // Restorer: the next chunk, or nullopt once the loader is done.
  std::optional<Part> Pop() {
    MutexLock lock(&mu_);
    while (queue_.empty() && !done_) cv_.Wait(&mu_);
    if (queue_.empty()) return std::nullopt;
    Part part = std::move(queue_.front());
    queue_.pop_front();
    cv_.SignalAll();
    return part;
  }
  void Stop() {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  Status load_status() {
    MutexLock lock(&mu_);
    return load_status_;
  }

 private:
  static constexpr size_t kMaxQueued = 8;
  Mutex mu_;
  CondVar cv_;
  std::deque<Part> queue_ ABSL_GUARDED_BY(mu_);
  bool manifest_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Status load_status_ ABSL_GUARDED_BY(mu_);
};

// One checkpoint, loaded on a second thread while this one restores what
// is already read (the restore is the longer part; the load hides behind it).
Status RestoreOne(const CheckpointStore& store, uint64_t id, index::IndexInterface* index,
                  consume::AgentTable* agents, AliasCheckpoint* aliases,
                  CheckpointImage* manifest) {
  ChunkHandOff hand_off;
  std::thread loader([&] {
    Status status = store.Stream(
        id, manifest, [&](std::vector<CheckpointRun>&& runs, std::vector<uint64_t>&& hashes) {
          hand_off.ManifestRead();
          if (!hand_off.Push({std::move(runs), std::move(hashes)})) {
            return absl::CancelledError("restore stopped");
          }
          return absl::OkStatus();
        });
    hand_off.Done(std::move(status));
  });
  auto finish_loader = [&] {
    hand_off.Stop();
    loader.join();
  };
  if (Status status = hand_off.WaitManifest(); !status.ok()) {
    finish_loader();
    return status;
  }
  // What the store's files can hold bounds the manifest's sizing hints.
  StatusOr<CheckpointRestorer> restorer =
      CheckpointRestorer::Begin(*manifest, index, store.DiskBytes() / sizeof(uint64_t));
  if (!restorer.ok()) {
    finish_loader();
    return restorer.status();
  }
  while (std::optional<ChunkHandOff::Part> part = hand_off.Pop()) {
    restorer->Add(part->runs, part->hashes);
  }
  finish_loader();
  if (Status status = hand_off.load_status(); !status.ok()) {
    restorer->Abort();  // fail closed: nothing of a damaged checkpoint stays
    return status;
  }
  if (aliases != nullptr) {
    // Captured at the index's position: restored with it, or not at all.
    if (Status status = aliases->Restore(manifest->aliases.value_or(std::string())); !status.ok()) {
      restorer->Abort();
      return status;
    }
  }
  Status finished = restorer->Finish(agents);
  if (!finished.ok() && aliases != nullptr) aliases->Restore("").IgnoreError();
  return finished;
}

}  // namespace

StatusOr<std::optional<CheckpointImage>> RestoreNewest(
    const CheckpointStore& store, index::IndexInterface* index, consume::AgentTable* agents,
    uint64_t* id, size_t* skipped, const std::function<Status(const CheckpointInfo&)>& accept,
    AliasCheckpoint* aliases) {
  auto logger = log::Get("storage");
  // Newest first; each one that does not load, or whose restored digest
  // differs, is logged and the next older one tried.
  for (const CheckpointInfo& info : store.List()) {
    CheckpointImage manifest;
    Status status = info.manifest_status;
    if (status.ok() && accept) {
      if (Status vetted = accept(info); !vetted.ok()) {
        logger->error("checkpoint {} in {} refused, trying an older one: {}", info.id, store.dir(),
                      std::string(vetted.message()));
        ++*skipped;
        continue;
      }
    }
    if (status.ok()) status = RestoreOne(store, info.id, index, agents, aliases, &manifest);
    if (status.ok()) {
      *id = info.id;
      return std::optional<CheckpointImage>(std::move(manifest));
    }
    if (absl::IsFailedPrecondition(status)) return status;  // the index was not empty: a bug
    logger->error("checkpoint {} in {} is unusable, trying an older one: {}", info.id, store.dir(),
                  status.ToString());
    ++*skipped;
  }
  return std::optional<CheckpointImage>();
}

Checkpointer::Checkpointer(CheckpointerOptions options, consume::ApplyLoop* apply,
                           index::IndexInterface* index, prometheus::Registry* registry)
    : options_(std::move(options)), apply_(apply), index_(index) {
  if (registry == nullptr) return;
  const prometheus::Histogram::BucketBoundaries write_buckets = {
      0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  const prometheus::Histogram::BucketBoundaries pause_buckets = {
      0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
  duration_ = &prometheus::BuildHistogram()
                   .Name("kvindex_checkpoint_duration_seconds")
                   .Help("Time to capture and write one checkpoint")
                   .Register(*registry)
                   .Add({}, write_buckets);
  pause_ = &prometheus::BuildHistogram()
                .Name("kvindex_checkpoint_apply_pause_seconds")
                .Help("How long a checkpoint capture paused apply (lookups do not pause)")
                .Register(*registry)
                .Add({}, pause_buckets);
  bytes_ = &prometheus::BuildGauge()
                .Name("kvindex_checkpoint_bytes")
                .Help("Size of the last checkpoint written (hashes and manifest)")
                .Register(*registry)
                .Add({});
  disk_bytes_ = &prometheus::BuildGauge()
                     .Name("kvindex_checkpoint_disk_bytes")
                     .Help("Bytes of the checkpoint database on disk")
                     .Register(*registry)
                     .Add({});
  age_ = &prometheus::BuildGauge()
              .Name("kvindex_checkpoint_age_seconds")
              .Help("Seconds since the last good checkpoint (written or restored); -1 = none yet")
              .Register(*registry)
              .Add({});
  age_->Set(-1);
  applied_seq_ = &prometheus::BuildGauge()
                      .Name("kvindex_checkpoint_applied_seq")
                      .Help("Log position of the last good checkpoint")
                      .Register(*registry)
                      .Add({});
  restore_seconds_ = &prometheus::BuildGauge()
                          .Name("kvindex_checkpoint_restore_seconds")
                          .Help("Time the start-up restore from a checkpoint took")
                          .Register(*registry)
                          .Add({});
  writes_ = &prometheus::BuildCounter()
                 .Name("kvindex_checkpoint_writes_total")
                 .Help("Checkpoints written")
                 .Register(*registry)
                 .Add({});
  failures_family_ = &prometheus::BuildCounter()
                          .Name("kvindex_checkpoint_failures_total")
                          .Help(
                              "Checkpoint writes or database opens that failed, by reason "
                              "(disk_full, io, other)")
                          .Register(*registry);
  refused_family_ = &prometheus::BuildCounter()
                         .Name("kvindex_checkpoint_refused_total")
                         .Help(
                             "Checkpoints not restored because they belong to another stream "
                             "(stream_identity), lie past its end (past_stream_end) or the "
                             "stream does not exist (stream_missing)")
                         .Register(*registry);
  for (const char* reason : {"disk_full", "io", "other"})
    failures_family_->Add({{"reason", reason}});
}

Checkpointer::~Checkpointer() { Stop(); }

Status Checkpointer::EnsureOpen() {
  if (store_ != nullptr) {
    std::error_code ec;
    if (std::filesystem::exists(options_.dir + "/CURRENT", ec) || ec) return absl::OkStatus();
    // Deleted under us (an operator, a cleanup job): every write into it
    // would fail until a restart. A new database takes its place.
    log::Get("storage")->error(
        "checkpoint database {} was deleted under the router: reopening it, empty", options_.dir);
    // Closed first: RocksDB refuses a second open of one path in a process.
    // (An export still reading the old one keeps it open: this open then
    // fails, counted, and is retried at the next interval.)
    {
      MutexLock lock(&shared_mu_);
      shared_store_.reset();
    }
    store_.reset();
    have_good_ = false;  // the next checkpoint is written whatever changed
  }
  KVINDEX_ASSIGN_OR_RETURN(
      std::unique_ptr<CheckpointStore> opened,
      CheckpointStore::Open(options_.dir, {.keep = options_.keep, .quarantine_damaged = true}));
  store_ = std::move(opened);
  MutexLock lock(&shared_mu_);
  shared_store_ = store_;
  return absl::OkStatus();
}

StatusOr<CheckpointInfo> Checkpointer::Import(std::string_view exported) {
  KVINDEX_RETURN_IF_ERROR(EnsureOpen());
  return store_->Import(exported);
}

bool Checkpointer::HasCheckpoint() { return EnsureOpen().ok() && !store_->List().empty(); }

StatusOr<std::string> Checkpointer::ExportNewest(uint64_t* applied_seq) const {
  std::shared_ptr<const CheckpointStore> store;
  {
    MutexLock lock(&shared_mu_);
    store = shared_store_;
  }
  if (store == nullptr) return absl::NotFoundError("no checkpoint store open yet");
  for (const CheckpointInfo& info : store->List()) {
    if (!info.manifest_status.ok()) continue;
    // The structure is checked here; the importer verifies the digest.
    if (!store->Load(info.id, /*verify_digest=*/false).ok()) continue;
    *applied_seq = info.applied_seq;
    return store->Export(info.id);
  }
  return absl::NotFoundError("no usable checkpoint yet");
}

StatusOr<RestoreResult> Checkpointer::Restore(consume::AgentTable* agents) {
  RestoreResult result;
  auto logger = log::Get("storage");
  if (Status status = EnsureOpen(); !status.ok()) {
    Failed(status);
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  // The stream as it is now: what each checkpoint is vetted against.
  std::optional<StreamIdentity> current;
  bool stream_missing = false;
  if (options_.stream_identity) {
    StatusOr<StreamIdentity> identity = options_.stream_identity();
    if (identity.ok()) {
      current = *identity;
      stream_ = *identity;
    } else if (absl::IsNotFound(identity.status())) {
      stream_missing = true;
    } else {
      logger->warn("stream identity unknown ({}): checkpoints restored without checking it",
                   identity.status().ToString());
    }
  }
  auto refuse = [&](std::string_view reason, std::string message) {
    refused_.fetch_add(1);
    if (refused_family_ != nullptr) {
      refused_family_->Add({{"reason", std::string(reason)}}).Increment();
    }
    return absl::AbortedError(std::move(message));
  };
  auto accept = [&](const CheckpointInfo& info) -> Status {
    if (stream_missing) {
      if (info.applied_seq == 0) return absl::OkStatus();
      return refuse("stream_missing",
                    absl::StrCat("its position ", info.applied_seq, " is of stream '", info.stream,
                                 "', and the stream does not exist now: rebuilding from the log"));
    }
    if (!current.has_value()) return absl::OkStatus();
    if (!info.stream.empty() &&
        (info.stream != current->name || info.stream_created_ns != current->created_ns)) {
      return refuse("stream_identity",
                    absl::StrCat("it is of stream '", info.stream, "' created at ",
                                 info.stream_created_ns, " ns, the log is stream '", current->name,
                                 "' created at ", current->created_ns,
                                 " ns (another cluster's, or the stream was recreated): "
                                 "rebuilding from the log"));
    }
    if (info.applied_seq > current->last_seq) {
      return refuse(
          "past_stream_end",
          absl::StrCat("its position ", info.applied_seq, " is past the end of stream '",
                       current->name, "' (", current->last_seq, "): rebuilding from the log"));
    }
    return absl::OkStatus();
  };
  std::optional<CheckpointImage> image;
  uint64_t id = 0;
  KVINDEX_ASSIGN_OR_RETURN(
      image, RestoreNewest(*store_, index_, agents, &id, &result.skipped, accept, aliases_.get()));
  if (!image.has_value()) {
    if (result.skipped == 0) {
      logger->info("no checkpoint in {}: starting from the log", options_.dir);
    } else {
      logger->error(
          "no checkpoint in {} verifies: starting from the log ({} refused for their stream)",
          options_.dir, refused_.load());
    }
    return result;
  }
  result.ingest = std::move(image->ingest);
  result.loaded = true;
  result.id = id;
  result.applied_seq = image->applied_seq;
  result.entries = image->total_entries();
  result.seconds = Seconds(std::chrono::steady_clock::now() - start);
  last_seq_.store(image->applied_seq);
  last_good_ = std::chrono::steady_clock::now();
  have_good_ = true;
  if (restore_seconds_ != nullptr) restore_seconds_->Set(result.seconds);
  if (applied_seq_ != nullptr) applied_seq_->Set(static_cast<double>(image->applied_seq));
  UpdateAge();
  logger->info(
      "restored checkpoint {} from {}: position {}, {} entries, digest {:016x} in {:.3f} s", id,
      options_.dir, image->applied_seq, result.entries, image->digest, result.seconds);
  return result;
}

void Checkpointer::Start() {
  if (thread_.joinable() || options_.interval.count() <= 0) return;
  stop_.Reset();
  thread_ = std::thread([this] { Run(); });
}

void Checkpointer::Stop() {
  if (!thread_.joinable()) return;
  stop_.Raise();
  thread_.join();
}

void Checkpointer::Run() {
  auto next = std::chrono::steady_clock::now() + options_.interval;
  // Wake at least every second to keep the age gauge current.
  while (!stop_.WaitUntil(
      std::min(next, std::chrono::steady_clock::now() + std::chrono::seconds(1)))) {
    if (std::chrono::steady_clock::now() >= next) {
      WriteNow().IgnoreError();  // failures are counted and logged inside
      next = std::chrono::steady_clock::now() + options_.interval;
    }
    UpdateAge();
  }
}

Status Checkpointer::WriteNow() {
  const auto start = std::chrono::steady_clock::now();
  if (Status status = EnsureOpen(); !status.ok()) {
    Failed(status);
    return status;
  }
  if (have_good_ && index_->Stats().applied_seq == last_seq_.load()) {
    last_good_ = start;  // the last checkpoint still holds the whole state
    return absl::OkStatus();
  }
  CheckpointImage image;
  std::unique_ptr<index::IndexCapture> capture;
  Status opened;
  std::chrono::steady_clock::duration pause{};
  const bool held = ingest_ != nullptr && ingest_->Hold();
  // The only apply pause: the capture opens (one pointer per node), the
  // entries are read below while apply goes on.
  apply_->RunOnWriter([&] {
    const auto captured = std::chrono::steady_clock::now();
    StatusOr<std::unique_ptr<index::IndexCapture>> begun = index_->BeginCapture();
    if (begun.ok()) {
      capture = std::move(*begun);
      image = CaptureManifest(&apply_->agents());
      if (held) image.ingest = ingest_->Save();
      if (aliases_ != nullptr) image.aliases = aliases_->Save();
    } else {
      opened = begun.status();
    }
    pause = std::chrono::steady_clock::now() - captured;
  });
  if (ingest_ != nullptr) ingest_->Release();
  if (!opened.ok()) {
    Failed(opened);
    return opened;
  }
  image.applied_seq = capture->stats().applied_seq;
  if (ingest_ != nullptr && !held) {
    log::Get("storage")->warn(
        "checkpoint at position {} without the ingest sources' states (they did not pause in "
        "time): after a restart from it they clear and replay from seq 0",
        image.applied_seq);
  }
  const int64_t pause_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(pause).count();
  int64_t longest = longest_pause_ns_.load();
  while (pause_ns > longest && !longest_pause_ns_.compare_exchange_weak(longest, pause_ns)) {
  }
  if (pause_ != nullptr) pause_->Observe(Seconds(pause));
  if (!stream_.has_value() && options_.stream_identity) {
    // Unknown at Restore (NATS down, or the stream not created yet).
    if (StatusOr<StreamIdentity> identity = options_.stream_identity(); identity.ok()) {
      stream_ = *identity;
    }
  }
  if (stream_.has_value()) {
    image.stream = stream_->name;
    image.stream_created_ns = stream_->created_ns;
  }
  StatusOr<CheckpointInfo> info = store_->WriteCapture(std::move(image), capture.get());
  capture.reset();
  if (!info.ok()) {
    Failed(info.status());
    return info.status();
  }
  const auto end = std::chrono::steady_clock::now();
  last_seq_.store(info->applied_seq);
  last_good_ = end;
  have_good_ = true;
  if (duration_ != nullptr) duration_->Observe(Seconds(end - start));
  if (bytes_ != nullptr) bytes_->Set(static_cast<double>(info->bytes));
  if (disk_bytes_ != nullptr) disk_bytes_->Set(static_cast<double>(store_->DiskBytes()));
  if (applied_seq_ != nullptr) applied_seq_->Set(static_cast<double>(info->applied_seq));
  if (writes_ != nullptr) writes_->Increment();
  UpdateAge();
  log::Get("storage")->debug(
      "checkpoint {} written: position {}, {} entries, {} bytes, {:.3f} s "
      "(apply paused {:.3f} s)",
      info->id, info->applied_seq, Entries(*info), info->bytes, Seconds(end - start),
      Seconds(pause));
  return absl::OkStatus();
}

void Checkpointer::Failed(const Status& status) {
  failures_.fetch_add(1);
  if (failures_family_ != nullptr)
    failures_family_->Add({{"reason", FailureReason(status)}}).Increment();
  if (uint64_t suppressed = 0; failure_log_.Allow(&suppressed)) {
    log::Get("storage")->error(
        "checkpoint to {} failed (serving from memory; retrying every interval): {} ({} more "
        "suppressed)",
        options_.dir, status.ToString(), suppressed);
  }
}

void Checkpointer::UpdateAge() {
  if (age_ == nullptr || !have_good_) return;
  age_->Set(Seconds(std::chrono::steady_clock::now() - last_good_));
}

}  // namespace kvindex::storage
