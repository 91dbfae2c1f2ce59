#include "storage/checkpoint_store.h"

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <sys/statvfs.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "shared/base/bytes.h"
#include "shared/log/log.h"
#include "storage/checkpoint_format.h"
#include "storage/internal/sticky_error_fs.h"

namespace kvindex::storage {
namespace {

namespace fs = std::filesystem;

// rocksdb::Status becomes a kvindex Status here and nowhere else.
Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(std::string(what), ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsIOError()) return absl::UnavailableError(message);
  if (s.IsInvalidArgument() || s.IsNotSupported()) return absl::FailedPreconditionError(message);
  return absl::InternalError(message);
}

// CURRENT names a MANIFEST that is not there (RocksDB answers an IO error,
// not a corruption, so without this the database never opens again).
bool CurrentIsDangling(const std::string& dir) {
  std::ifstream current(dir + "/CURRENT");
  if (!current) return false;
  std::string manifest;
  std::getline(current, manifest);
  return manifest.empty() || manifest.find('/') != std::string::npos ||
         !fs::exists(fs::path(dir) / manifest);
}

// RocksDB's own diagnostics go to our log, not to a LOG file: Debian's
// assertion-enabled build aborts on a log file written after ENOSPC.
class SpdLogger : public rocksdb::Logger {
 public:
  SpdLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    log::Get("rocksdb")->warn("{}", line);
  }
};

rocksdb::Options DbOptions() {
  static const auto logger = std::make_shared<SpdLogger>();
  rocksdb::Options options;
  options.info_log = logger;
  options.create_if_missing = true;
  // Hashes are random 64-bit values: compression buys nothing.
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  // One damaged checkpoint file must not keep the database from opening:
  // it is found (and skipped) when read, the others stay usable.
  options.paranoid_checks = false;
  options.skip_checking_sst_file_sizes_on_db_open = true;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options.max_manifest_file_size = 8 << 20;
  // Data arrives only as ingested files and leaves with whole-file deletes:
  // nothing to compact, and every checkpoint keeps a file of its own.
  options.disable_auto_compactions = true;
  return options;
}

uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string IngestDir(const std::string& dir) { return dir + ".ingest"; }

// What List and Write report of a checkpoint (its manifest's fields).
CheckpointInfo Describe(uint64_t id, const CheckpointImage& image, uint64_t chunks,
                        uint64_t bytes) {
  CheckpointInfo info;
  info.id = id;
  info.applied_seq = image.applied_seq;
  info.digest = image.digest;
  std::copy(std::begin(image.entries), std::end(image.entries), std::begin(info.entries));
  info.created_unix_ms = image.created_unix_ms;
  info.chunks = chunks;
  info.bytes = bytes;
  info.models = image.models;
  info.sources = image.sources.size();
  info.agents = image.agents.size();
  info.stream = image.stream;
  info.stream_created_ns = image.stream_created_ns;
  return info;
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, CheckpointStoreOptions options,
                                 std::unique_ptr<rocksdb::DB> db)
    : dir_(std::move(dir)),
      options_(options),
      db_(std::move(db)),
      sticky_fs_(std::make_shared<internal::StickyErrorFileSystem>(rocksdb::FileSystem::Default())),
      writer_env_(rocksdb::NewCompositeEnv(sticky_fs_)) {}

CheckpointStore::~CheckpointStore() = default;

StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(const std::string& dir,
                                                                 CheckpointStoreOptions options) {
  if (options.keep == 0) return absl::InvalidArgumentError("checkpoints kept must be >= 1");
  const rocksdb::Options db_options = DbOptions();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  if (options.read_only) {
    if (!fs::exists(dir + "/CURRENT")) {
      return absl::NotFoundError(absl::StrCat("no checkpoint database in ", dir));
    }
    s = rocksdb::DB::OpenForReadOnly(db_options, dir, &raw);
  } else {
    std::error_code ec;
    fs::create_directories(dir, ec);
    s = rocksdb::DB::Open(db_options, dir, &raw);
    if (!s.ok() && options.quarantine_damaged &&
        (s.IsCorruption() || s.IsInvalidArgument() || CurrentIsDangling(dir))) {
      const std::string aside = absl::StrCat(dir, ".damaged-", NowUnixMs() / 1000);
      log::Get("storage")->error(
          "checkpoint database {} does not open ({}); moved to {}, starting without checkpoints",
          dir, s.ToString(), aside);
      fs::rename(dir, aside, ec);
      if (ec) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot move the damaged checkpoint database aside: ", ec.message()));
      }
      s = rocksdb::DB::Open(db_options, dir, &raw);
    }
  }
  KVINDEX_RETURN_IF_ERROR(FromRocks(s, absl::StrCat("open checkpoint database ", dir)));
  auto store = std::unique_ptr<CheckpointStore>(
      new CheckpointStore(dir, options, std::unique_ptr<rocksdb::DB>(raw)));
  // Ids grow across restarts, past every file's keys (damaged ones too).
  std::vector<rocksdb::LiveFileMetaData> files;
  store->db_->GetLiveFilesMetaData(&files);
  for (const rocksdb::LiveFileMetaData& file : files) {
    uint64_t id = 0;
    bool manifest = false;
    uint32_t chunk = 0;
    if (format::ParseKey(file.largestkey, &id, &manifest, &chunk)) {
      store->next_id_ = std::max(store->next_id_, id + 1);
    }
  }
  if (!options.read_only) {
    std::error_code ec;
    fs::remove_all(IngestDir(dir), ec);  // an interrupted write's file
  }
  return store;
}

StatusOr<CheckpointInfo> CheckpointStore::Write(const CheckpointImage& image) {
  CheckpointImage manifest = image;  // the runs are fed below, not encoded from here
  manifest.runs.clear();
  manifest.hashes.clear();
  const uint64_t data = image.hashes.size() * 8 + image.runs.size() * 32;
  return WriteRuns(&manifest, data, [&](format::ChunkWriter* chunks) -> Status {
    for (const CheckpointRun& run : image.runs) {
      KVINDEX_RETURN_IF_ERROR(chunks->Add(run.model, run.source, run.tier, image.Hashes(run)));
    }
    return absl::OkStatus();
  });
}

StatusOr<CheckpointInfo> CheckpointStore::WriteCapture(CheckpointImage manifest,
                                                       index::IndexCapture* capture) {
  manifest.applied_seq = capture->stats().applied_seq;
  manifest.digest = capture->stats().digest;
  std::copy(std::begin(capture->stats().entries), std::end(capture->stats().entries),
            std::begin(manifest.entries));
  manifest.models.clear();
  for (const index::IndexCapture::Model& m : capture->models()) {
    manifest.models.push_back({m.name, m.block_size, m.blocks});
  }
  manifest.sources.clear();
  manifest.runs.clear();
  manifest.hashes.clear();
  CheckpointImage* image = &manifest;
  // A run header (at most 32 bytes) per node and holder: a few bytes per
  // entry at most, whatever the nodes' lengths.
  return WriteRuns(image, image->total_entries() * 12, [&](format::ChunkWriter* chunks) -> Status {
    // Per model, by the capture's source id: the checkpoint's source id
    // and the digest prefix, made the first time a run names the source
    // (so a run costs no lookup by name and no allocation).
    struct Source {
      uint32_t id = UINT32_MAX;
      std::string prefix;
    };
    std::vector<std::vector<Source>> sources(capture->models().size());
    for (size_t m = 0; m < sources.size(); ++m) {
      sources[m].resize(capture->models()[m].sources.size());
    }
    absl::flat_hash_map<SourceKey, uint32_t> ids;  // checkpoint ids across models
    uint64_t digest = 0;
    uint64_t counted[kNumTiers] = {};
    Status status;
    capture->ForEachRun(
        [&](uint32_t model, uint32_t source, Tier tier, std::span<const uint64_t> hashes) {
          if (!status.ok()) return;
          Source& s = sources[model][source];
          if (s.id == UINT32_MAX) {
            const index::IndexCapture::Model& m = capture->models()[model];
            const SourceKey& key = m.sources[source];
            auto [it, added] = ids.try_emplace(key, static_cast<uint32_t>(image->sources.size()));
            if (added) image->sources.push_back(key);
            s.id = it->second;
            s.prefix = index::EntriesDigestPrefix(m.name, key);
          }
          digest += index::EntriesDigest(s.prefix, tier, hashes);
          counted[static_cast<int>(tier)] += hashes.size();
          status = chunks->Add(model, s.id, tier, hashes);
        });
    KVINDEX_RETURN_IF_ERROR(status);
    // What was read must be the state captured: a checkpoint that would not
    // restore to its own digest is never written.
    bool counts_equal = true;
    for (int t = 0; t < kNumTiers; ++t) counts_equal &= counted[t] == image->entries[t];
    if (digest != image->digest || !counts_equal) {
      return absl::InternalError(
          absl::StrCat("checkpoint capture read digest ", absl::Hex(digest, absl::kZeroPad16),
                       counts_equal ? "" : " (and entry counts)", ", the index had ",
                       absl::Hex(image->digest, absl::kZeroPad16), " at position ",
                       image->applied_seq, ": not written"));
    }
    return absl::OkStatus();
  });
}

StatusOr<CheckpointInfo> CheckpointStore::WriteRuns(
    CheckpointImage* manifest, uint64_t data,
    const std::function<Status(format::ChunkWriter*)>& runs) {
  if (options_.read_only) return absl::FailedPreconditionError("checkpoint store is read-only");
  const uint64_t id = next_id_;
  std::vector<std::pair<std::string, std::string>> ingest = format::EncodeIngest(id, *manifest);
  // After the ingest records: their keys sort so ('i' < 'k').
  for (auto& record : format::EncodeAliases(id, *manifest)) ingest.push_back(std::move(record));
  // What the file will hold, for the free-space check: the runs, the rest.
  uint64_t estimate = data + (uint64_t{1} << 16);
  for (const auto& [key, value] : ingest) estimate += key.size() + value.size();
  // Chunks are encoded one at a time straight into the SST writer: the
  // encoded checkpoint is never held in memory whole.
  uint64_t chunks = 0, bytes = 0;
  KVINDEX_RETURN_IF_ERROR(WriteRecords(id, estimate, [&](const PutRecord& put) -> Status {
    uint32_t next_chunk = 0;
    format::ChunkWriter writer(
        [&](std::string_view chunk) { return put(format::ChunkKey(id, next_chunk++), chunk); });
    KVINDEX_RETURN_IF_ERROR(runs(&writer));
    KVINDEX_RETURN_IF_ERROR(writer.Finish());
    chunks = writer.chunks();
    bytes = writer.chunk_bytes();
    for (const auto& [key, value] : ingest) {
      KVINDEX_RETURN_IF_ERROR(put(key, value));
      bytes += value.size();
    }
    const std::string encoded = format::EncodeManifest(*manifest, chunks, writer.chunk_bytes());
    bytes += encoded.size();
    return put(format::ManifestKey(id), encoded);
  }));
  intact_.insert(id);  // just written whole
  CheckpointInfo info = Describe(id, *manifest, chunks, bytes);
  if (Status pruned = Prune(options_.keep); !pruned.ok()) {
    log::Get("storage")->warn("pruning old checkpoints: {}", pruned.ToString());
  }
  return info;
}

Status CheckpointStore::WriteRecords(uint64_t id, uint64_t data, const RecordSource& records) {
  // Refuse early rather than let RocksDB run into a full or read-only
  // file system (see sticky_error_fs.h): the file, its index, and room
  // for RocksDB's MANIFEST.
  struct statvfs fs_stats {};
  if (statvfs(dir_.c_str(), &fs_stats) == 0) {
    if ((fs_stats.f_flag & ST_RDONLY) != 0) {
      return absl::UnavailableError(absl::StrCat("checkpoint directory ", dir_, " is read-only"));
    }
    const uint64_t free_bytes = static_cast<uint64_t>(fs_stats.f_bavail) * fs_stats.f_frsize;
    const uint64_t need = data + data / 16 + (uint64_t{1} << 20);
    if (free_bytes < need) {
      return absl::ResourceExhaustedError(
          absl::StrCat("checkpoint needs ", need, " bytes in ", dir_, ", ", free_bytes, " free"));
    }
  }
  // A background error from an earlier failure (e.g. a MANIFEST write
  // refused by a full disk) clears once the disk has room again.
  db_->Resume().PermitUncheckedError();

  std::error_code ec;
  fs::create_directories(IngestDir(dir_), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", IngestDir(dir_), ": ", ec.message()));
  }
  const std::string path = absl::StrCat(IngestDir(dir_), "/", id, ".sst");
  rocksdb::Options writer_options = DbOptions();
  writer_options.env = writer_env_.get();
  sticky_fs_->TakeError().PermitUncheckedError();  // a previous write's, already reported
  std::optional<rocksdb::SstFileWriter> writer;
  writer.emplace(rocksdb::EnvOptions(), writer_options);
  auto fail = [&](const rocksdb::Status& s, std::string_view what) {
    writer.reset();
    fs::remove(path, ec);
    return FromRocks(s, what);
  };
  if (rocksdb::Status s = writer->Open(path); !s.ok()) return fail(s, "create checkpoint file");
  rocksdb::Status put_status;
  const Status emitted = records([&](std::string_view key, std::string_view value) -> Status {
    put_status = writer->Put(rocksdb::Slice(key.data(), key.size()),
                             rocksdb::Slice(value.data(), value.size()));
    return put_status.ok() ? Status() : absl::UnavailableError("checkpoint file write failed");
  });
  if (!put_status.ok()) return fail(put_status, "write checkpoint file");
  if (!emitted.ok()) {
    writer.reset();
    fs::remove(path, ec);
    return emitted;
  }
  if (rocksdb::Status s = writer->Finish(); !s.ok()) return fail(s, "finish checkpoint file");
  writer.reset();
  if (rocksdb::IOStatus s = sticky_fs_->TakeError(); !s.ok()) {
    return fail(s, "write checkpoint file");
  }
  rocksdb::IngestExternalFileOptions ingest;
  ingest.move_files = true;
  if (rocksdb::Status s = db_->IngestExternalFile({path}, ingest); !s.ok()) {
    return fail(s, "ingest checkpoint file");
  }
  next_id_ = id + 1;
  return absl::OkStatus();
}

namespace {
constexpr std::string_view kExportMagic = "kvindex-checkpoint-1\n";
}  // namespace

StatusOr<std::string> CheckpointStore::Export(uint64_t id) const {
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  std::string out(kExportMagic);
  const std::string begin = format::RangeBegin(id);
  const std::string end = format::RangeBegin(id + 1);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  bool manifest = false;
  for (it->Seek(begin); it->Valid() && it->key().ToStringView() < end; it->Next()) {
    const std::string_view key = it->key().ToStringView();
    bytes::PutString(&out, key.substr(begin.size()));
    bytes::PutString(&out, it->value().ToStringView());
    manifest |= key == format::ManifestKey(id);
  }
  KVINDEX_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("read checkpoint ", id)));
  if (!manifest) return absl::NotFoundError(absl::StrCat("no checkpoint ", id, " in ", dir_));
  bytes::PutFixed64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

StatusOr<CheckpointInfo> CheckpointStore::Import(std::string_view exported) {
  if (options_.read_only) return absl::FailedPreconditionError("checkpoint store is read-only");
  if (exported.size() < kExportMagic.size() + 8 ||
      exported.substr(0, kExportMagic.size()) != kExportMagic) {
    return absl::DataLossError("not an exported kvindex checkpoint");
  }
  const std::string_view body = exported.substr(0, exported.size() - 8);
  bytes::Reader trailer(exported.substr(body.size()), "exported checkpoint");
  uint64_t checksum = 0;
  KVINDEX_RETURN_IF_ERROR(trailer.Fixed64(&checksum, "checksum"));
  if (checksum != XXH3_64bits(body.data(), body.size())) {
    return absl::DataLossError("exported checkpoint: checksum mismatch (damaged in transfer)");
  }
  const uint64_t id = next_id_;
  const std::string prefix = format::RangeBegin(id);
  bytes::Reader in(body.substr(kExportMagic.size()), "exported checkpoint");
  Records records;
  std::string suffix, value;
  while (!in.done()) {
    KVINDEX_RETURN_IF_ERROR(in.String(&suffix, "key"));
    KVINDEX_RETURN_IF_ERROR(in.String(&value, "value"));
    std::string key = prefix + suffix;
    uint64_t parsed_id = 0;
    bool is_manifest = false;
    uint32_t chunk = 0;
    if (!format::ParseKey(key, &parsed_id, &is_manifest, &chunk) ||
        (!records.empty() && key <= records.back().first)) {
      return absl::DataLossError("exported checkpoint: a key out of order or unknown");
    }
    records.emplace_back(std::move(key), std::move(value));
  }
  if (records.empty() || records.back().first != format::ManifestKey(id)) {
    return absl::DataLossError("exported checkpoint: no manifest");
  }
  uint64_t data = 0;
  for (const auto& [key, value] : records) data += key.size() + value.size();
  KVINDEX_RETURN_IF_ERROR(WriteRecords(id, data, [&](const PutRecord& put) -> Status {
    for (const auto& [key, value] : records) KVINDEX_RETURN_IF_ERROR(put(key, value));
    return Status();
  }));
  // Verified like any other before it counts: a bad one goes again.
  if (StatusOr<CheckpointImage> image = Load(id, /*verify_digest=*/true); !image.ok()) {
    const std::string b = format::RangeBegin(id), e = format::RangeBegin(id + 1);
    db_->DeleteRange(rocksdb::WriteOptions(), db_->DefaultColumnFamily(), b, e)
        .PermitUncheckedError();
    return image.status();
  }
  intact_.insert(id);
  for (const CheckpointInfo& info : List()) {
    if (info.id == id) return info;
  }
  return absl::InternalError("imported checkpoint not listed");
}

bool CheckpointStore::Intact(const CheckpointInfo& info) {
  if (!info.manifest_status.ok()) return false;
  if (intact_.contains(info.id)) return true;
  // Read once (chunks, RocksDB block checksums, counts), then remembered.
  CheckpointImage manifest;
  const Status read =
      Stream(info.id, &manifest,
             [](std::vector<CheckpointRun>&&, std::vector<uint64_t>&&) { return Status(); });
  if (!read.ok()) {
    log::Get("storage")->warn("checkpoint {} is damaged ({}); it does not count as kept", info.id,
                              read.ToString());
    return false;
  }
  intact_.insert(info.id);
  return true;
}

Status CheckpointStore::Prune(size_t keep) {
  const std::vector<CheckpointInfo> all = List();
  if (all.size() <= keep) return absl::OkStatus();
  // The newest `keep` checkpoints that read back whole stay, with whatever
  // is newer than the oldest of them: a damaged checkpoint never counts
  // towards `keep`, so it never pushes out the last good fallback.
  size_t good = 0;
  uint64_t first_kept = 0;
  for (const CheckpointInfo& info : all) {
    if (good == keep) break;
    if (!Intact(info)) continue;
    ++good;
    first_kept = info.id;
  }
  if (good == 0) return absl::OkStatus();  // nothing known good: keep everything
  const std::string begin = format::RangeBegin(0);
  const std::string end = format::RangeBegin(first_kept);
  rocksdb::Slice b(begin), e(end);
  // Whole files go at once; DeleteRange covers anything left in between.
  KVINDEX_RETURN_IF_ERROR(FromRocks(
      rocksdb::DeleteFilesInRange(db_.get(), db_->DefaultColumnFamily(), &b, &e), "prune"));
  KVINDEX_RETURN_IF_ERROR(FromRocks(
      db_->DeleteRange(rocksdb::WriteOptions(), db_->DefaultColumnFamily(), b, e), "prune"));
  std::erase_if(intact_, [&](uint64_t id) { return id < first_kept; });
  return absl::OkStatus();
}

std::vector<CheckpointInfo> CheckpointStore::List() const {
  // Ids come from the files' key ranges, not from reading them: a damaged
  // file only hides (and fails) its own checkpoint.
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  std::set<uint64_t> ids;
  for (const rocksdb::LiveFileMetaData& file : files) {
    uint64_t first = 0, last = 0;
    bool manifest = false;
    uint32_t chunk = 0;
    if (!format::ParseKey(file.smallestkey, &first, &manifest, &chunk) ||
        !format::ParseKey(file.largestkey, &last, &manifest, &chunk) || last < first) {
      continue;
    }
    for (uint64_t id = first; id <= last && id - first < 4096; ++id) ids.insert(id);
  }
  std::vector<CheckpointInfo> out;
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    std::string value;
    const rocksdb::Status s = db_->Get(read, format::ManifestKey(*it), &value);
    if (s.IsNotFound()) continue;  // pruned
    CheckpointInfo& info = out.emplace_back();
    info.id = *it;
    StatusOr<format::Manifest> m =
        s.ok() ? format::DecodeManifest(value)
               : StatusOr<format::Manifest>(FromRocks(s, absl::StrCat("read checkpoint ", *it)));
    if (!m.ok()) {
      info.manifest_status = m.status();
      continue;
    }
    uint64_t ingest_bytes = 0;
    for (const format::IngestEntry& entry : m->ingest) ingest_bytes += entry.bytes;
    if (m->aliases.has_value()) ingest_bytes += m->aliases->bytes;
    info = Describe(*it, m->image, m->chunks, m->chunk_bytes + ingest_bytes + value.size());
  }
  return out;
}

Status CheckpointStore::Stream(
    uint64_t id, CheckpointImage* manifest_out,
    const std::function<Status(std::vector<CheckpointRun>&&, std::vector<uint64_t>&&)>& on_chunk)
    const {
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  read.readahead_size = size_t{4} << 20;
  std::string value;
  KVINDEX_RETURN_IF_ERROR(FromRocks(db_->Get(read, format::ManifestKey(id), &value),
                                    absl::StrCat("read checkpoint ", id)));
  KVINDEX_ASSIGN_OR_RETURN(format::Manifest manifest, format::DecodeManifest(value));
  *manifest_out = std::move(manifest.image);
  const size_t models = manifest_out->models.size(), sources = manifest_out->sources.size();
  // Ingest records: sources begun so far, and the next piece of the last one.
  uint32_t ingest_begun = 0, ingest_piece = 0;
  uint32_t alias_pieces = 0;  // alias record pieces read so far
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  uint64_t next_chunk = 0, bytes = 0;
  uint64_t counted[kNumTiers] = {};
  const std::string last = format::ManifestKey(id);
  for (it->Seek(format::ChunkKey(id, 0)); it->Valid() && it->key().ToStringView() < last;
       it->Next()) {
    uint64_t key_id = 0;
    bool is_manifest = false;
    uint32_t chunk = 0, source = 0, piece = 0;
    if (format::ParseIngestKey(it->key().ToStringView(), &key_id, &source, &piece) &&
        key_id == id) {
      // After every data chunk (keys sort so), pieces in order.
      if (next_chunk != manifest.chunks) {
        return absl::DataLossError(absl::StrCat("checkpoint ", id, ": chunk ", next_chunk,
                                                " missing before the ingest states"));
      }
      const bool next_source = piece == 0 && source == ingest_begun;
      const bool next_piece =
          piece != 0 && ingest_begun > 0 && source == ingest_begun - 1 && piece == ingest_piece;
      if ((!next_source && !next_piece) || source >= manifest_out->ingest.size()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", id, ": ingest state ", source,
                                                " piece ", piece, " unexpected"));
      }
      if (next_source) ++ingest_begun;
      manifest_out->ingest[source].state.append(it->value().data(), it->value().size());
      ingest_piece = piece + 1;
      continue;
    }
    if (format::ParseAliasKey(it->key().ToStringView(), &key_id, &piece) && key_id == id) {
      // After every data chunk and ingest state (keys sort so), in order.
      if (!manifest.aliases.has_value() || next_chunk != manifest.chunks ||
          ingest_begun != manifest.ingest.size() || piece != alias_pieces) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", id, ": alias record piece ", piece, " unexpected"));
      }
      manifest_out->aliases->append(it->value().data(), it->value().size());
      ++alias_pieces;
      continue;
    }
    if (!format::ParseKey(it->key().ToStringView(), &key_id, &is_manifest, &chunk) ||
        key_id != id || is_manifest || chunk != next_chunk) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", id, ": chunk ", next_chunk, " missing or out of order"));
    }
    std::vector<CheckpointRun> runs;
    std::vector<uint64_t> hashes;
    hashes.reserve(it->value().size() / 8);
    KVINDEX_RETURN_IF_ERROR(
        format::DecodeChunk(it->value().ToStringView(), models, sources, &runs, &hashes));
    for (const CheckpointRun& run : runs)
      counted[static_cast<int>(run.tier)] += run.end - run.begin;
    bytes += it->value().size();
    ++next_chunk;
    KVINDEX_RETURN_IF_ERROR(on_chunk(std::move(runs), std::move(hashes)));
  }
  KVINDEX_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("read checkpoint ", id)));
  if (ingest_begun != manifest.ingest.size()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", id, ": ", ingest_begun, " of ",
                                            manifest.ingest.size(), " ingest states"));
  }
  for (size_t i = 0; i < manifest.ingest.size(); ++i) {
    const std::string& state = manifest_out->ingest[i].state;
    if (state.size() != manifest.ingest[i].bytes ||
        XXH3_64bits(state.data(), state.size()) != manifest.ingest[i].checksum) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", id, ": ingest state ", i, " damaged or incomplete"));
    }
  }
  if (manifest.aliases.has_value()) {
    const std::string& state = *manifest_out->aliases;
    if (alias_pieces == 0 || state.size() != manifest.aliases->bytes ||
        XXH3_64bits(state.data(), state.size()) != manifest.aliases->checksum) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", id, ": alias record damaged or incomplete"));
    }
  }
  if (next_chunk != manifest.chunks || bytes != manifest.chunk_bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint ", id, ": ", next_chunk, " chunks (", bytes,
                                            " bytes) where the manifest names ", manifest.chunks,
                                            " (", manifest.chunk_bytes, ")"));
  }
  if (!std::equal(std::begin(counted), std::end(counted), std::begin(manifest_out->entries))) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", id, ": entry counts differ from the manifest"));
  }
  return absl::OkStatus();
}

StatusOr<CheckpointImage> CheckpointStore::Load(uint64_t id, bool verify_digest) const {
  CheckpointImage image;
  KVINDEX_RETURN_IF_ERROR(
      Stream(id, &image, [&](std::vector<CheckpointRun>&& runs, std::vector<uint64_t>&& hashes) {
        // The manifest's counts are checked only at the end: reserve no
        // more than the store's files can hold.
        if (image.hashes.empty()) {
          image.hashes.reserve(std::min(image.total_entries(), DiskBytes() / sizeof(uint64_t)));
        }
        const uint64_t base = image.hashes.size();
        image.hashes.insert(image.hashes.end(), hashes.begin(), hashes.end());
        for (CheckpointRun run : runs) {
          run.begin += base;
          run.end += base;
          CheckpointRun* back = image.runs.empty() ? nullptr : &image.runs.back();
          if (back != nullptr && back->model == run.model && back->source == run.source &&
              back->tier == run.tier && back->end == run.begin) {
            back->end = run.end;  // a run split across chunks
          } else {
            image.runs.push_back(run);
          }
        }
        return absl::OkStatus();
      }));
  if (verify_digest) KVINDEX_RETURN_IF_ERROR(image.Verify());
  return image;
}

uint64_t CheckpointStore::DiskBytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(dir_, ec)) {
    if (entry.is_regular_file(ec)) total += entry.file_size(ec);
  }
  return total;
}

}  // namespace kvindex::storage
