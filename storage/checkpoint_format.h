// The on-disk form of a checkpoint (docs/operations.md, "Checkpoints"): keys
// and values of the RocksDB database under --data-dir/checkpoints.
//
//   c <id:be64> d <chunk:be32>  data chunk: run records, about 1 MiB each
//   c <id:be64> i <source:be32> <piece:be32>
//                               saved ingest source state, in pieces of at
//                               most 1 MiB (embedded routers only)
//   c <id:be64> k <piece:be32>  the SGLang alias map's saved state
//                               (CheckpointImage::aliases), in pieces of at
//                               most 1 MiB (routers with one only)
//   c <id:be64> m               manifest: everything but the hashes
//
// The keys of one checkpoint are contiguous and sorted, so a checkpoint is
// one SST file ingested in one atomic step (the manifest sorts last), and an
// old one goes with one DeleteRange.
//
// A run record: varint model, varint source, u8 tier, varint n, then n
// little-endian u64 hashes (random 64-bit values: stored raw, uncompressed).
// The manifest: u32 version, the fields of CheckpointImage except runs,
// hashes and ingest states, then (version 2) each ingest source's key, size
// and XXH3-64, then (version 3) the stream's name and creation time, then
// (version 4) per agent its subjects' numbering (AgentTable::SubjectState:
// token, incarnation, subject_seq, model), then (version 5) per agent a byte
// AgentState::renumber and one SubjectState::renumber byte per subject (in
// the version 4 order), then (version 6) per agent AgentState::live_position,
// a byte AgentState::heartbeated and its model_sources (model, then its
// sources), then (version 7) a byte saying whether the alias record is there
// and its size and XXH3-64, then an XXH3-64 of all the bytes before it.
// Versions 1 (no ingest section), 2 (no stream identity), 3 (no subject
// numbering), 4 (no renumber flags: read as false), 5 (no agent lives: every
// owned source read as announced, live_position 0) and 6 (no alias record:
// restored as an empty map) are still read. A record whose pieces are
// missing, out of order or fail their size or XXH3-64 makes the whole
// checkpoint DataLoss (like a damaged ingest state or chunk).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/base/status.h"
#include "storage/checkpoint_image.h"

namespace kvindex::storage::format {

inline constexpr uint32_t kVersion = 7;
inline constexpr size_t kChunkBytes = size_t{1} << 20;

std::string ManifestKey(uint64_t id);
std::string ChunkKey(uint64_t id, uint32_t chunk);
// [begin, end) of every key of checkpoints [first_id, end_id).
std::string RangeBegin(uint64_t first_id);
std::string IngestKey(uint64_t id, uint32_t source, uint32_t piece);
// Parses a key; false when it is not a checkpoint key. An ingest key parses
// with *manifest false and *chunk kIngestChunk.
inline constexpr uint32_t kIngestChunk = UINT32_MAX;
// An alias key parses with *manifest false and *chunk kAliasChunk.
inline constexpr uint32_t kAliasChunk = UINT32_MAX - 1;
bool ParseKey(std::string_view key, uint64_t* id, bool* manifest, uint32_t* chunk);
bool ParseIngestKey(std::string_view key, uint64_t* id, uint32_t* source, uint32_t* piece);
std::string AliasKey(uint64_t id, uint32_t piece);
bool ParseAliasKey(std::string_view key, uint64_t* id, uint32_t* piece);

struct IngestEntry {
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the state
};

struct Manifest {
  uint64_t chunks = 0;
  uint64_t chunk_bytes = 0;            // sum of the data chunks' sizes
  CheckpointImage image;               // without runs and hashes; ingest keys only
  std::vector<IngestEntry> ingest;     // per image.ingest entry
  std::optional<IngestEntry> aliases;  // the alias record, when there is one
};

// The image's ingest states as (key, value) records, in key order.
std::vector<std::pair<std::string, std::string>> EncodeIngest(uint64_t id,
                                                              const CheckpointImage& image);
// The image's alias state as (key, value) records, in key order (none when
// it has no alias state).
std::vector<std::pair<std::string, std::string>> EncodeAliases(uint64_t id,
                                                               const CheckpointImage& image);

// Runs in, data chunks of about kChunkBytes out, one at a time, so a writer
// holds one chunk, not the whole encoded checkpoint: consecutive runs of
// one (model, source, tier) become one run record, a run longer than a
// chunk's room continues in the next chunk.
class ChunkWriter {
 public:
  using Put = std::function<Status(std::string_view chunk)>;
  explicit ChunkWriter(Put put) : put_(std::move(put)) {}
  // Stops at put's first error (returned here and by every later call).
  Status Add(uint32_t model, uint32_t source, Tier tier, std::span<const uint64_t> hashes);
  // Puts the last chunk.
  Status Finish();
  uint64_t chunks() const { return chunks_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }

 private:
  void CloseRecord();
  Status PutChunk();

  Put put_;
  Status status_;
  std::string chunk_;
  // The open record: its key, and its hashes not yet in chunk_.
  bool open_ = false;
  uint32_t model_ = 0, source_ = 0;
  Tier tier_ = Tier::kDevice;
  std::string pending_;
  uint64_t chunks_ = 0, chunk_bytes_ = 0;
};

// Every chunk at once (tests; CheckpointStore streams them).
std::vector<std::string> EncodeChunks(const CheckpointImage& image);
std::string EncodeManifest(const CheckpointImage& image, uint64_t chunks, uint64_t chunk_bytes);

StatusOr<Manifest> DecodeManifest(std::string_view value);
// Appends the chunk's runs and hashes to *image (whose models and sources
// come from the manifest).
Status DecodeChunk(std::string_view value, CheckpointImage* image);
// The same into bare vectors; runs must name models < `models` and sources
// < `sources`.
Status DecodeChunk(std::string_view value, size_t models, size_t sources,
                   std::vector<CheckpointRun>* runs, std::vector<uint64_t>* hashes);

}  // namespace kvindex::storage::format
