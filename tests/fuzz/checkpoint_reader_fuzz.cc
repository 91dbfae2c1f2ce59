// libFuzzer target for the checkpoint reader's record decoding
// (storage/checkpoint_format: what CheckpointStore::Stream / Load read back
// from a checkpoint's records), in memory, fed as a damaged checkpoint would
// be. Input: one flags byte, then length-prefixed records (u32
// little-endian length, then the bytes; a short tail ends the list): the
// first is the manifest value, the others data chunks.
//   flags bit 0: the harness appends the manifest's XXH3-64 trailer (else
//                the record carries its own, and the fuzzer mostly meets
//                the checksum check);
//   flags bit 1: after decoding, the harness recomputes the entry counts
//                and the digest from the decoded runs (so the restore below
//                is reached with arbitrary content);
//   flags bit 2: restore the verified image into a fresh index.
// Invariants (abort = finding):
// - every failure is DataLoss (a damaged checkpoint), never a crash;
// - a decoded manifest encodes back (EncodeManifest) to one that decodes
//   to the same manifest;
// - decoded runs stay inside the decoded hashes and name known models,
//   sources and tiers; the chunk's (model, source, tier, hash) sequence,
//   encoded back with ChunkWriter, decodes to the same sequence;
// - RestoreCheckpoint either succeeds, and the index then holds exactly
//   the image's digest and per-tier counts, or fails and leaves the index
//   empty (fail closed).
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "shared/consume/agent_table.h"
#include "shared/index/index_interface.h"
#include "shared/index/kv_index.h"
#include "storage/checkpoint_format.h"
#include "storage/checkpoint_image.h"
#include "tests/fuzz/checkpoint_sample.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/seed_writer.h"

namespace {

namespace format = kvindex::storage::format;
using kvindex::storage::CheckpointImage;
using kvindex::storage::CheckpointModel;
using kvindex::storage::CheckpointRun;

// One stored entry: model, source, tier, hash (indices into the manifest).
using Entry = std::tuple<uint32_t, uint32_t, int, uint64_t>;

std::vector<Entry> Expand(const std::vector<CheckpointRun>& runs,
                          const std::vector<uint64_t>& hashes) {
  std::vector<Entry> out;
  for (const CheckpointRun& run : runs) {
    for (uint64_t i = run.begin; i < run.end; ++i) {
      out.emplace_back(run.model, run.source, static_cast<int>(run.tier), hashes[i]);
    }
  }
  return out;
}

bool SameManifest(const format::Manifest& a, const format::Manifest& b) {
  const CheckpointImage& x = a.image;
  const CheckpointImage& y = b.image;
  if (a.chunks != b.chunks || a.chunk_bytes != b.chunk_bytes) return false;
  if (x.applied_seq != y.applied_seq || x.digest != y.digest ||
      x.created_unix_ms != y.created_unix_ms || x.models != y.models || x.sources != y.sources ||
      x.stream != y.stream || x.stream_created_ns != y.stream_created_ns) {
    return false;
  }
  if (!std::equal(std::begin(x.entries), std::end(x.entries), std::begin(y.entries))) return false;
  if (x.ingest.size() != y.ingest.size() || x.agents.size() != y.agents.size()) return false;
  for (size_t i = 0; i < x.ingest.size(); ++i) {
    if (x.ingest[i].key != y.ingest[i].key) return false;
  }
  for (size_t i = 0; i < x.agents.size(); ++i) {
    const auto& p = x.agents[i];
    const auto& q = y.agents[i];
    if (p.agent != q.agent || p.incarnation != q.incarnation || p.last_msg_seq != q.last_msg_seq ||
        p.last_heartbeat_position != q.last_heartbeat_position || p.lease_ms != q.lease_ms ||
        p.expired != q.expired || p.gaps != q.gaps || p.stale != q.stale ||
        p.expiries != q.expiries || p.sources != q.sources) {
      return false;
    }
  }
  return true;
}

void CheckManifestRoundTrip(const format::Manifest& manifest) {
  // The ingest states are not in the manifest (only their keys, sizes and
  // checksums), so the re-encoded sizes differ; everything else must not.
  const std::string encoded =
      format::EncodeManifest(manifest.image, manifest.chunks, manifest.chunk_bytes);
  kvindex::StatusOr<format::Manifest> again = format::DecodeManifest(encoded);
  FUZZ_CHECK(again.ok(), "an encoded manifest decodes");
  FUZZ_CHECK(SameManifest(manifest, *again), "a manifest round-trips");
}

void CheckChunk(std::string_view value, size_t models, size_t sources,
                const std::vector<CheckpointRun>& runs, const std::vector<uint64_t>& hashes) {
  for (const CheckpointRun& run : runs) {
    FUZZ_CHECK(run.begin <= run.end && run.end <= hashes.size(), "a run inside the hashes");
    FUZZ_CHECK(run.model < models && run.source < sources &&
                   static_cast<int>(run.tier) < kvindex::kNumTiers,
               "a run names a known model, source and tier");
  }
  FUZZ_CHECK(hashes.size() * 8 <= value.size(), "no more hashes than bytes");
  // Encoded back, chunk by chunk, and decoded: the same entries in order.
  std::vector<std::string> chunks;
  format::ChunkWriter writer([&](std::string_view chunk) {
    chunks.emplace_back(chunk);
    return kvindex::Status();
  });
  for (const CheckpointRun& run : runs) {
    const std::span<const uint64_t> span(hashes.data() + run.begin, run.end - run.begin);
    FUZZ_CHECK(writer.Add(run.model, run.source, run.tier, span).ok(), "ChunkWriter::Add");
  }
  FUZZ_CHECK(writer.Finish().ok(), "ChunkWriter::Finish");
  std::vector<CheckpointRun> runs2;
  std::vector<uint64_t> hashes2;
  for (const std::string& chunk : chunks) {
    FUZZ_CHECK(format::DecodeChunk(chunk, models, sources, &runs2, &hashes2).ok(),
               "an encoded chunk decodes");
  }
  FUZZ_CHECK(Expand(runs, hashes) == Expand(runs2, hashes2), "a chunk's entries round-trip");
}

void Restore(const CheckpointImage& image) {
  kvindex::index::KvIndex index;
  kvindex::consume::AgentTable agents;
  const kvindex::Status restored = kvindex::storage::RestoreCheckpoint(image, &index, &agents);
  const kvindex::index::IndexStats stats = index.Stats();
  // The manifest's `blocks` sizing hints are read before anything is
  // verified: the index reserves no more than the data holds (a huge hint
  // once mapped a huge index: a timeout, docs/fuzzing.md).
  for (const CheckpointModel& model : image.models) {
    const auto profile = index.ProfileLocator(model.name, /*histograms=*/false);
    FUZZ_CHECK(!profile || profile->capacity <= 8 * image.hashes.size() + 4096,
               "the restore reserves no more blocks than the data holds");
  }
  if (!restored.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(restored) || absl::IsInvalidArgument(restored) ||
                   absl::IsResourceExhausted(restored),
               "a refused restore says why (DataLoss, InvalidArgument, ResourceExhausted)");
    for (uint64_t n : stats.entries) FUZZ_CHECK(n == 0, "a failed restore leaves no entry");
    return;
  }
  FUZZ_CHECK(stats.digest == image.digest, "the restored index has the image's digest");
  for (int t = 0; t < kvindex::kNumTiers; ++t) {
    FUZZ_CHECK(stats.entries[t] == image.entries[t], "the restored index has the image's counts");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (size_t{4} << 20)) return 0;
  const uint8_t flags = data[0];
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string_view> records;
  while (in.size() >= 4 && records.size() < 64) {
    uint32_t length = 0;
    std::memcpy(&length, in.data(), 4);
    in.remove_prefix(4);
    length = static_cast<uint32_t>(std::min<size_t>(length, in.size()));
    records.push_back(in.substr(0, length));
    in.remove_prefix(length);
  }
  if (records.empty()) return 0;

  std::string manifest_value(records[0]);
  if (flags & 1) {
    const uint64_t checksum = XXH3_64bits(manifest_value.data(), manifest_value.size());
    manifest_value.append(reinterpret_cast<const char*>(&checksum), 8);
  }
  kvindex::StatusOr<format::Manifest> manifest = format::DecodeManifest(manifest_value);
  if (!manifest.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(manifest.status()), "a bad manifest is DataLoss");
    return 0;
  }
  CheckManifestRoundTrip(*manifest);

  CheckpointImage image = std::move(manifest->image);
  const size_t models = image.models.size(), sources = image.sources.size();
  for (size_t i = 1; i < records.size(); ++i) {
    std::vector<CheckpointRun> runs;
    std::vector<uint64_t> hashes;
    const kvindex::Status decoded =
        format::DecodeChunk(records[i], models, sources, &runs, &hashes);
    if (!decoded.ok()) {
      FUZZ_CHECK(absl::IsDataLoss(decoded), "a bad chunk is DataLoss");
      return 0;
    }
    CheckChunk(records[i], models, sources, runs, hashes);
    // The image-level decoder appends the same chunk the same way.
    const size_t before = image.hashes.size();
    FUZZ_CHECK(format::DecodeChunk(records[i], &image).ok(), "both DecodeChunk overloads agree");
    FUZZ_CHECK(image.hashes.size() - before == hashes.size(), "the same hashes appended");
  }
  if (flags & 2) {
    uint64_t digest = 0;
    for (uint64_t& n : image.entries) n = 0;
    for (const CheckpointRun& run : image.runs) {
      digest += kvindex::index::EntriesDigest(
          image.models[run.model].name, image.sources[run.source], run.tier, image.Hashes(run));
      image.entries[static_cast<int>(run.tier)] += run.end - run.begin;
    }
    image.digest = digest;
    FUZZ_CHECK(image.Verify().ok(), "an image with its recomputed digest verifies");
  }
  const kvindex::Status verified = image.Verify();
  if (!verified.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(verified), "a damaged image is DataLoss");
    return 0;
  }
  if (flags & 4) Restore(image);
  return 0;
}

// Seeds: a real checkpoint's manifest and chunks (checkpoint_sample.h),
// with its own checksum and with the harness's, restored; a manifest
// alone; an empty one.
void kvindex::fuzz::WriteSeeds(const SeedWriter& write) {
  const CheckpointImage image = SampleCheckpoint();
  const std::vector<std::string> chunks = format::EncodeChunks(image);
  uint64_t chunk_bytes = 0;
  for (const std::string& chunk : chunks) chunk_bytes += chunk.size();
  const std::string manifest = format::EncodeManifest(image, chunks.size(), chunk_bytes);
  auto record = [](std::string* out, std::string_view bytes) {
    const uint32_t n = static_cast<uint32_t>(bytes.size());
    out->append(reinterpret_cast<const char*>(&n), 4);
    out->append(bytes);
  };
  std::string whole(1, '\x04');
  record(&whole, manifest);
  for (const std::string& chunk : chunks) record(&whole, chunk);
  write("sample_restore", whole);
  std::string fixed(1, '\x07');
  record(&fixed, std::string_view(manifest).substr(0, manifest.size() - 8));
  for (const std::string& chunk : chunks) record(&fixed, chunk);
  write("sample_fixed_checksum_and_digest", fixed);
  std::string alone(1, '\x00');
  record(&alone, manifest);
  write("manifest_only", alone);
  const std::string empty_manifest = format::EncodeManifest(CheckpointImage(), 0, 0);
  std::string empty(1, '\x04');
  record(&empty, empty_manifest);
  write("empty_checkpoint", empty);
  // The reproducer of the huge `blocks` hint: the sample with a hint of
  // 2^27 blocks for its first model (the restore reserved them all, a
  // mapping of gigabytes for a few entries, before the hint was bounded).
  CheckpointImage hinted = image;
  hinted.models[0].blocks = uint64_t{1} << 27;
  const std::string hinted_manifest = format::EncodeManifest(hinted, chunks.size(), chunk_bytes);
  std::string huge(1, '\x07');
  record(&huge, std::string_view(hinted_manifest).substr(0, hinted_manifest.size() - 8));
  for (const std::string& chunk : chunks) record(&huge, chunk);
  write("huge_blocks_hint", huge);
}
