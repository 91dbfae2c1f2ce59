#include "storage/checkpoint_format.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "shared/base/bytes.h"

namespace kvindex::storage::format {
namespace {

void PutBe(std::string* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetBe(std::string_view in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return value;
}

using bytes::PutFixed64;
using bytes::PutString;
using bytes::PutVarint;

class Reader : public bytes::Reader {
 public:
  explicit Reader(std::string_view in) : bytes::Reader(in, "checkpoint") {}
};

}  // namespace

std::string RangeBegin(uint64_t first_id) {
  std::string key = "c";
  PutBe(&key, first_id, 8);
  return key;
}

std::string ManifestKey(uint64_t id) { return RangeBegin(id) + "m"; }

std::string ChunkKey(uint64_t id, uint32_t chunk) {
  std::string key = RangeBegin(id) + "d";
  PutBe(&key, chunk, 4);
  return key;
}

std::string IngestKey(uint64_t id, uint32_t source, uint32_t piece) {
  std::string key = RangeBegin(id) + "i";
  PutBe(&key, source, 4);
  PutBe(&key, piece, 4);
  return key;
}

std::string AliasKey(uint64_t id, uint32_t piece) {
  std::string key = RangeBegin(id) + "k";
  PutBe(&key, piece, 4);
  return key;
}

bool ParseAliasKey(std::string_view key, uint64_t* id, uint32_t* piece) {
  if (key.size() != 14 || key[0] != 'c' || key[9] != 'k') return false;
  *id = GetBe(key.substr(1), 8);
  *piece = static_cast<uint32_t>(GetBe(key.substr(10), 4));
  return true;
}

bool ParseIngestKey(std::string_view key, uint64_t* id, uint32_t* source, uint32_t* piece) {
  if (key.size() != 18 || key[0] != 'c' || key[9] != 'i') return false;
  *id = GetBe(key.substr(1), 8);
  *source = static_cast<uint32_t>(GetBe(key.substr(10), 4));
  *piece = static_cast<uint32_t>(GetBe(key.substr(14), 4));
  return true;
}

std::vector<std::pair<std::string, std::string>> EncodeIngest(uint64_t id,
                                                              const CheckpointImage& image) {
  std::vector<std::pair<std::string, std::string>> records;
  for (size_t s = 0; s < image.ingest.size(); ++s) {
    const std::string& state = image.ingest[s].state;
    for (size_t at = 0, piece = 0; at < state.size() || piece == 0; at += kChunkBytes, ++piece) {
      records.emplace_back(IngestKey(id, static_cast<uint32_t>(s), static_cast<uint32_t>(piece)),
                           state.substr(std::min(at, state.size()), kChunkBytes));
    }
  }
  return records;
}

std::vector<std::pair<std::string, std::string>> EncodeAliases(uint64_t id,
                                                               const CheckpointImage& image) {
  std::vector<std::pair<std::string, std::string>> records;
  if (!image.aliases.has_value()) return records;
  const std::string& state = *image.aliases;
  for (size_t at = 0, piece = 0; at < state.size() || piece == 0; at += kChunkBytes, ++piece) {
    records.emplace_back(AliasKey(id, static_cast<uint32_t>(piece)),
                         state.substr(std::min(at, state.size()), kChunkBytes));
  }
  return records;
}

bool ParseKey(std::string_view key, uint64_t* id, bool* manifest, uint32_t* chunk) {
  if (key.size() < 10 || key[0] != 'c') return false;
  *id = GetBe(key.substr(1), 8);
  if (key[9] == 'i' && key.size() == 18) {
    *manifest = false;
    *chunk = kIngestChunk;
    return true;
  }
  if (key[9] == 'k' && key.size() == 14) {
    *manifest = false;
    *chunk = kAliasChunk;
    return true;
  }
  if (key[9] == 'm' && key.size() == 10) {
    *manifest = true;
    return true;
  }
  if (key[9] == 'd' && key.size() == 14) {
    *manifest = false;
    *chunk = static_cast<uint32_t>(GetBe(key.substr(10), 4));
    return true;
  }
  return false;
}

Status ChunkWriter::Add(uint32_t model, uint32_t source, Tier tier,
                        std::span<const uint64_t> hashes) {
  if (open_ && (model != model_ || source != source_ || tier != tier_)) CloseRecord();
  while (!hashes.empty() && status_.ok()) {
    // Room for this record's hashes, its header (at most 32 bytes) included.
    const size_t used = chunk_.size() + pending_.size() + 32;
    if (used + 8 > kChunkBytes) {
      CloseRecord();
      status_ = PutChunk();
      continue;
    }
    if (!open_) {
      open_ = true;
      model_ = model;
      source_ = source;
      tier_ = tier;
    }
    const size_t n = std::min(hashes.size(), (kChunkBytes - used) / 8);
    const size_t offset = pending_.size();
    pending_.resize(offset + n * 8);
    std::memcpy(pending_.data() + offset, hashes.data(), n * 8);
    hashes = hashes.subspan(n);
  }
  return status_;
}

void ChunkWriter::CloseRecord() {
  if (!open_) return;
  open_ = false;
  if (pending_.empty()) return;
  if (chunk_.capacity() < kChunkBytes) chunk_.reserve(kChunkBytes);
  PutVarint(&chunk_, model_);
  PutVarint(&chunk_, source_);
  chunk_.push_back(static_cast<char>(tier_));
  PutVarint(&chunk_, pending_.size() / 8);
  chunk_.append(pending_);
  pending_.clear();
}

Status ChunkWriter::PutChunk() {
  if (chunk_.empty()) return absl::OkStatus();
  KVINDEX_RETURN_IF_ERROR(put_(chunk_));
  ++chunks_;
  chunk_bytes_ += chunk_.size();
  chunk_.clear();
  return absl::OkStatus();
}

Status ChunkWriter::Finish() {
  if (!status_.ok()) return status_;
  CloseRecord();
  status_ = PutChunk();
  return status_;
}

std::vector<std::string> EncodeChunks(const CheckpointImage& image) {
  std::vector<std::string> chunks;
  ChunkWriter writer([&](std::string_view chunk) {
    chunks.emplace_back(chunk);
    return absl::OkStatus();
  });
  for (const CheckpointRun& run : image.runs) {
    writer.Add(run.model, run.source, run.tier, image.Hashes(run)).IgnoreError();
  }
  writer.Finish().IgnoreError();
  return chunks;
}

std::string EncodeManifest(const CheckpointImage& image, uint64_t chunks, uint64_t chunk_bytes) {
  std::string out;
  PutBe(&out, kVersion, 4);
  PutVarint(&out, image.applied_seq);
  PutFixed64(&out, image.digest);
  for (uint64_t n : image.entries) PutVarint(&out, n);
  PutVarint(&out, image.created_unix_ms);
  PutVarint(&out, chunks);
  PutVarint(&out, chunk_bytes);
  PutVarint(&out, image.models.size());
  for (const CheckpointModel& model : image.models) {
    PutString(&out, model.name);
    PutVarint(&out, model.block_size);
    PutVarint(&out, model.blocks);
  }
  PutVarint(&out, image.sources.size());
  for (const SourceKey& source : image.sources) {
    PutString(&out, source.worker);
    PutVarint(&out, source.dp_rank);
  }
  PutVarint(&out, image.agents.size());
  for (const consume::AgentTable::AgentView& agent : image.agents) {
    PutString(&out, agent.agent);
    PutVarint(&out, agent.incarnation);
    PutVarint(&out, agent.last_msg_seq);
    PutVarint(&out, agent.last_heartbeat_position);
    PutVarint(&out, agent.lease_ms);
    out.push_back(agent.expired ? 1 : 0);
    PutVarint(&out, agent.gaps);
    PutVarint(&out, agent.stale);
    PutVarint(&out, agent.expiries);
    PutVarint(&out, agent.sources.size());
    for (const SourceKey& source : agent.sources) {
      PutString(&out, source.worker);
      PutVarint(&out, source.dp_rank);
    }
  }
  PutVarint(&out, image.ingest.size());
  for (const CheckpointIngestSource& source : image.ingest) {
    PutString(&out, source.key);
    PutVarint(&out, source.state.size());
    PutFixed64(&out, XXH3_64bits(source.state.data(), source.state.size()));
  }
  PutString(&out, image.stream);
  PutVarint(&out, static_cast<uint64_t>(image.stream_created_ns));
  for (const consume::AgentTable::AgentView& agent : image.agents) {  // version 4
    PutVarint(&out, agent.subjects.size());
    for (const auto& [token, subject] : agent.subjects) {
      PutString(&out, token);
      PutVarint(&out, subject.incarnation);
      PutVarint(&out, subject.last_seq);
      PutString(&out, subject.model);
    }
  }
  for (const consume::AgentTable::AgentView& agent : image.agents) {  // version 5
    out.push_back(agent.renumber ? 1 : 0);
    for (const auto& [token, subject] : agent.subjects) out.push_back(subject.renumber ? 1 : 0);
  }
  for (const consume::AgentTable::AgentView& agent : image.agents) {  // version 6
    PutVarint(&out, agent.live_position);
    out.push_back(agent.heartbeated ? 1 : 0);
    PutVarint(&out, agent.model_sources.size());
    for (const auto& [model, sources] : agent.model_sources) {
      PutString(&out, model);
      PutVarint(&out, sources.size());
      for (const SourceKey& source : sources) {
        PutString(&out, source.worker);
        PutVarint(&out, source.dp_rank);
      }
    }
  }
  out.push_back(image.aliases.has_value() ? 1 : 0);  // version 7
  if (image.aliases.has_value()) {
    PutVarint(&out, image.aliases->size());
    PutFixed64(&out, XXH3_64bits(image.aliases->data(), image.aliases->size()));
  }
  PutFixed64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

StatusOr<Manifest> DecodeManifest(std::string_view value) {
  if (value.size() < 12) return absl::DataLossError("checkpoint: manifest too short");
  const std::string_view body = value.substr(0, value.size() - 8);
  uint64_t checksum = 0;
  std::memcpy(&checksum, value.data() + body.size(), 8);  // little-endian host
  if (checksum != XXH3_64bits(body.data(), body.size())) {
    return absl::DataLossError("checkpoint: manifest checksum mismatch");
  }
  const uint32_t version = static_cast<uint32_t>(GetBe(body, 4));
  if (version < 1 || version > kVersion) {
    return absl::DataLossError(absl::StrCat("checkpoint: manifest version ", version,
                                            " (this build reads ", kVersion, ")"));
  }
  Reader in(body.substr(4));
  Manifest m;
  CheckpointImage& image = m.image;
  KVINDEX_RETURN_IF_ERROR(in.Varint(&image.applied_seq, "applied_seq"));
  KVINDEX_RETURN_IF_ERROR(in.Fixed64(&image.digest, "digest"));
  for (uint64_t& n : image.entries) KVINDEX_RETURN_IF_ERROR(in.Varint(&n, "entries"));
  KVINDEX_RETURN_IF_ERROR(in.Varint(&image.created_unix_ms, "created"));
  KVINDEX_RETURN_IF_ERROR(in.Varint(&m.chunks, "chunks"));
  KVINDEX_RETURN_IF_ERROR(in.Varint(&m.chunk_bytes, "chunk bytes"));
  uint64_t count = 0;
  KVINDEX_RETURN_IF_ERROR(in.Count(&count, 3, "models"));
  image.models.resize(count);
  for (CheckpointModel& model : image.models) {
    KVINDEX_RETURN_IF_ERROR(in.String(&model.name, "model name"));
    KVINDEX_RETURN_IF_ERROR(in.Varint32(&model.block_size, "block size"));
    KVINDEX_RETURN_IF_ERROR(in.Varint(&model.blocks, "blocks"));
  }
  KVINDEX_RETURN_IF_ERROR(in.Count(&count, 2, "sources"));
  image.sources.resize(count);
  for (SourceKey& source : image.sources) {
    KVINDEX_RETURN_IF_ERROR(in.String(&source.worker, "worker"));
    KVINDEX_RETURN_IF_ERROR(in.Varint32(&source.dp_rank, "dp_rank"));
  }
  KVINDEX_RETURN_IF_ERROR(in.Count(&count, 11, "agents"));
  image.agents.resize(count);
  for (consume::AgentTable::AgentView& agent : image.agents) {
    KVINDEX_RETURN_IF_ERROR(in.String(&agent.agent, "agent"));
    KVINDEX_RETURN_IF_ERROR(in.Varint(&agent.incarnation, "incarnation"));
    KVINDEX_RETURN_IF_ERROR(in.Varint(&agent.last_msg_seq, "msg_seq"));
    KVINDEX_RETURN_IF_ERROR(in.Varint(&agent.last_heartbeat_position, "heartbeat position"));
    KVINDEX_RETURN_IF_ERROR(in.Varint32(&agent.lease_ms, "lease"));
    uint8_t expired = 0;
    KVINDEX_RETURN_IF_ERROR(in.Byte(&expired, "expired"));
    agent.expired = expired != 0;
    KVINDEX_RETURN_IF_ERROR(in.Varint(&agent.gaps, "gaps"));
    KVINDEX_RETURN_IF_ERROR(in.Varint(&agent.stale, "stale"));
    KVINDEX_RETURN_IF_ERROR(in.Varint(&agent.expiries, "expiries"));
    uint64_t sources = 0;
    KVINDEX_RETURN_IF_ERROR(in.Count(&sources, 2, "agent sources"));
    for (uint64_t i = 0; i < sources; ++i) {
      SourceKey source;
      KVINDEX_RETURN_IF_ERROR(in.String(&source.worker, "agent source"));
      KVINDEX_RETURN_IF_ERROR(in.Varint32(&source.dp_rank, "agent source rank"));
      agent.sources.insert(std::move(source));
    }
  }
  if (version >= 2) {
    KVINDEX_RETURN_IF_ERROR(in.Count(&count, 10, "ingest sources"));
    image.ingest.resize(count);
    m.ingest.resize(count);
    for (size_t i = 0; i < count; ++i) {
      KVINDEX_RETURN_IF_ERROR(in.String(&image.ingest[i].key, "ingest source"));
      KVINDEX_RETURN_IF_ERROR(in.Varint(&m.ingest[i].bytes, "ingest bytes"));
      KVINDEX_RETURN_IF_ERROR(in.Fixed64(&m.ingest[i].checksum, "ingest checksum"));
    }
  }
  if (version >= 3) {
    KVINDEX_RETURN_IF_ERROR(in.String(&image.stream, "stream"));
    uint64_t created = 0;
    KVINDEX_RETURN_IF_ERROR(in.Varint(&created, "stream created"));
    image.stream_created_ns = static_cast<int64_t>(created);
  }
  if (version >= 4) {
    for (consume::AgentTable::AgentView& agent : image.agents) {
      KVINDEX_RETURN_IF_ERROR(in.Count(&count, 4, "agent subjects"));
      for (uint64_t i = 0; i < count; ++i) {
        std::string token;
        KVINDEX_RETURN_IF_ERROR(in.String(&token, "subject token"));
        consume::AgentTable::SubjectState& subject = agent.subjects[std::move(token)];
        KVINDEX_RETURN_IF_ERROR(in.Varint(&subject.incarnation, "subject incarnation"));
        KVINDEX_RETURN_IF_ERROR(in.Varint(&subject.last_seq, "subject_seq"));
        KVINDEX_RETURN_IF_ERROR(in.String(&subject.model, "subject model"));
      }
    }
  }
  if (version >= 5) {  // before: not saved, read as false
    for (consume::AgentTable::AgentView& agent : image.agents) {
      uint8_t renumber = 0;
      KVINDEX_RETURN_IF_ERROR(in.Byte(&renumber, "agent renumber"));
      agent.renumber = renumber != 0;
      for (auto& [token, subject] : agent.subjects) {
        KVINDEX_RETURN_IF_ERROR(in.Byte(&renumber, "subject renumber"));
        subject.renumber = renumber != 0;
      }
    }
  }
  if (version >= 6) {
    for (consume::AgentTable::AgentView& agent : image.agents) {
      KVINDEX_RETURN_IF_ERROR(in.Varint(&agent.live_position, "live position"));
      uint8_t heartbeated = 0;
      KVINDEX_RETURN_IF_ERROR(in.Byte(&heartbeated, "heartbeated"));
      agent.heartbeated = heartbeated != 0;
      KVINDEX_RETURN_IF_ERROR(in.Count(&count, 2, "agent models"));
      for (uint64_t i = 0; i < count; ++i) {
        std::string model;
        KVINDEX_RETURN_IF_ERROR(in.String(&model, "agent model"));
        absl::btree_set<SourceKey>& sources = agent.model_sources[std::move(model)];
        uint64_t n = 0;
        KVINDEX_RETURN_IF_ERROR(in.Count(&n, 2, "agent model sources"));
        for (uint64_t j = 0; j < n; ++j) {
          SourceKey source;
          KVINDEX_RETURN_IF_ERROR(in.String(&source.worker, "agent model source"));
          KVINDEX_RETURN_IF_ERROR(in.Varint32(&source.dp_rank, "agent model source rank"));
          sources.insert(std::move(source));
        }
      }
    }
  } else {
    // Before: every source it owned counts as announced; a node with a
    // lease announced one.
    for (consume::AgentTable::AgentView& agent : image.agents) {
      agent.heartbeated = agent.lease_ms != 0 || agent.last_heartbeat_position != 0;
    }
  }
  if (version >= 7) {  // before: no alias record
    uint8_t has_aliases = 0;
    KVINDEX_RETURN_IF_ERROR(in.Byte(&has_aliases, "alias record"));
    if (has_aliases > 1) return absl::DataLossError("checkpoint: garbled alias record flag");
    if (has_aliases != 0) {
      IngestEntry& entry = m.aliases.emplace();
      KVINDEX_RETURN_IF_ERROR(in.Varint(&entry.bytes, "alias bytes"));
      KVINDEX_RETURN_IF_ERROR(in.Fixed64(&entry.checksum, "alias checksum"));
      image.aliases.emplace();
    }
  }
  if (!in.done()) return absl::DataLossError("checkpoint: trailing bytes in the manifest");
  return m;
}

Status DecodeChunk(std::string_view value, CheckpointImage* image) {
  return DecodeChunk(value, image->models.size(), image->sources.size(), &image->runs,
                     &image->hashes);
}

Status DecodeChunk(std::string_view value, size_t models, size_t sources,
                   std::vector<CheckpointRun>* runs, std::vector<uint64_t>* hashes) {
  Reader in(value);
  while (!in.done()) {
    CheckpointRun run;
    KVINDEX_RETURN_IF_ERROR(in.Varint32(&run.model, "run model"));
    KVINDEX_RETURN_IF_ERROR(in.Varint32(&run.source, "run source"));
    uint8_t tier = 0;
    KVINDEX_RETURN_IF_ERROR(in.Byte(&tier, "run tier"));
    uint64_t n = 0;
    KVINDEX_RETURN_IF_ERROR(in.Count(&n, 8, "run length"));
    if (run.model >= models || run.source >= sources || tier >= kNumTiers) {
      return absl::DataLossError("checkpoint: run names an unknown model, source or tier");
    }
    run.tier = static_cast<Tier>(tier);
    run.begin = hashes->size();
    run.end = run.begin + n;
    const std::string_view bytes = in.Take(n * 8);
    const size_t offset = hashes->size();
    hashes->resize(offset + n);
    static_assert(std::endian::native == std::endian::little, "hashes are stored little-endian");
    // An empty run may come first: no memcpy from or to a null pointer.
    if (n > 0) std::memcpy(hashes->data() + offset, bytes.data(), n * 8);
    if (!runs->empty() && runs->back().model == run.model && runs->back().source == run.source &&
        runs->back().tier == run.tier && runs->back().end == run.begin) {
      runs->back().end = run.end;  // a run split across chunks
    } else {
      runs->push_back(run);
    }
  }
  return absl::OkStatus();
}

}  // namespace kvindex::storage::format
