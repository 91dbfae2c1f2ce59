#include "shared/codec/placement_codec.h"

#include <optional>

#include "shared/codec/msgpack_map.h"

namespace kvindex::codec {
namespace {

// Field names on the wire; docs/events.md documents each one.
constexpr std::string_view kVersion = "v";
constexpr std::string_view kEvents = "events";
constexpr std::string_view kKind = "kind";
constexpr std::string_view kModel = "model";
constexpr std::string_view kWorker = "worker";
constexpr std::string_view kDpRank = "dp_rank";
constexpr std::string_view kAgent = "agent";
constexpr std::string_view kEventId = "event_id";
constexpr std::string_view kTimestamp = "ts_ns";
constexpr std::string_view kTier = "tier";
constexpr std::string_view kBlockSize = "block_size";
constexpr std::string_view kParent = "parent";
constexpr std::string_view kHashes = "hashes";
constexpr std::string_view kSglangHashes = "sglang_hashes";
constexpr std::string_view kLeaseMs = "lease_ms";
constexpr std::string_view kSources = "sources";
constexpr std::string_view kHeartbeatSeq = "heartbeat_seq";
constexpr std::string_view kIncarnation = "incarnation";
constexpr std::string_view kMsgSeq = "msg_seq";
constexpr std::string_view kSubjectSeq = "subject_seq";
constexpr std::string_view kEndpoints = "endpoints";
constexpr std::string_view kAddress = "address";
// Longest endpoint address accepted ("host:port"; a DNS name is <= 253).
constexpr size_t kMaxAddressBytes = 512;

using internal::Packer;
using internal::PackString;
constexpr std::string_view kWhat = "placement batch";

void PackEvent(Packer& packer, const PlacementEvent& event) {
  const bool blocks = event.kind == PlacementKind::kStored || event.kind == PlacementKind::kRemoved;
  const bool stored = event.kind == PlacementKind::kStored;
  const bool heartbeat = event.kind == PlacementKind::kHeartbeat;
  const bool expired = event.kind == PlacementKind::kAgentExpired;
  uint32_t fields = 7;
  if (blocks) fields += 2;
  if (stored) fields += 2;
  // Written only when there are some, so other events are the same bytes
  // as before the field existed.
  const bool sglang = stored && !event.sglang_hashes.empty();
  if (sglang) fields += 1;
  if (heartbeat) fields += 2;
  // Written only when there is one, so a heartbeat without endpoints is the
  // same bytes as before the field existed.
  const bool endpoints = heartbeat && !event.endpoints.empty();
  if (endpoints) fields += 1;
  if (expired) fields += 1;
  packer.pack_map(fields);
  PackString(packer, kKind);
  PackString(packer, PlacementKindName(event.kind));
  PackString(packer, kModel);
  PackString(packer, event.model);
  PackString(packer, kWorker);
  PackString(packer, event.source.worker);
  PackString(packer, kDpRank);
  packer.pack_uint32(event.source.dp_rank);
  PackString(packer, kAgent);
  PackString(packer, event.agent);
  PackString(packer, kEventId);
  packer.pack_uint64(event.event_id);
  PackString(packer, kTimestamp);
  packer.pack_uint64(event.timestamp_ns);
  if (blocks) {
    PackString(packer, kTier);
    PackString(packer, TierName(event.tier));
    PackString(packer, kHashes);
    packer.pack_array(static_cast<uint32_t>(event.block_hashes.size()));
    for (uint64_t hash : event.block_hashes) packer.pack_uint64(hash);
  }
  if (stored) {
    PackString(packer, kBlockSize);
    packer.pack_uint32(event.block_size);
    PackString(packer, kParent);
    if (event.parent_hash.has_value()) {
      packer.pack_uint64(*event.parent_hash);
    } else {
      packer.pack_nil();
    }
  }
  if (sglang) {
    PackString(packer, kSglangHashes);
    packer.pack_array(static_cast<uint32_t>(event.sglang_hashes.size()));
    for (uint64_t hash : event.sglang_hashes) packer.pack_uint64(hash);
  }
  if (heartbeat) {
    PackString(packer, kLeaseMs);
    packer.pack_uint32(event.lease_ms);
    PackString(packer, kSources);
    packer.pack_array(static_cast<uint32_t>(event.sources.size()));
    for (const SourceKey& source : event.sources) {
      packer.pack_array(2);
      PackString(packer, source.worker);
      packer.pack_uint32(source.dp_rank);
    }
  }
  if (endpoints) {
    PackString(packer, kEndpoints);
    packer.pack_array(static_cast<uint32_t>(event.endpoints.size()));
    for (const SourceEndpoint& endpoint : event.endpoints) {
      packer.pack_map(4);
      PackString(packer, kWorker);
      PackString(packer, endpoint.source.worker);
      PackString(packer, kDpRank);
      packer.pack_uint32(endpoint.source.dp_rank);
      PackString(packer, kModel);
      PackString(packer, endpoint.model);
      PackString(packer, kAddress);
      PackString(packer, endpoint.address);
    }
  }
  if (expired) {
    PackString(packer, kHeartbeatSeq);
    packer.pack_uint64(event.heartbeat_seq);
  }
}

// msgpack sizes, mirroring PackEvent: an integer at its widest (uint64),
// a string or container header by its length (fixstr/str8/16/32, fix/16/32).
constexpr size_t kIntBound = 9;
size_t StringBytes(size_t length) {
  const size_t header = length < 32 ? 1 : length < 256 ? 2 : length < 65536 ? 3 : 5;
  return header + length;
}
size_t StringBytes(std::string_view value) { return StringBytes(value.size()); }
size_t ContainerHeaderBytes(size_t count) { return count < 16 ? 1 : count < 65536 ? 3 : 5; }
// A key and an integer value.
size_t IntField(std::string_view key) { return StringBytes(key) + kIntBound; }
// A key and an array of hashes.
size_t HashesField(std::string_view key, size_t count) {
  return StringBytes(key) + ContainerHeaderBytes(count) + kIntBound * count;
}

Status FieldError(std::string_view field, std::string_view problem) {
  return internal::FieldError(kWhat, field, problem);
}

StatusOr<uint64_t> AsUint(const msgpack::object& object, std::string_view field) {
  return internal::AsUint(object, kWhat, field);
}

StatusOr<uint32_t> AsUint32(const msgpack::object& object, std::string_view field) {
  KVINDEX_ASSIGN_OR_RETURN(uint64_t value, AsUint(object, field));
  if (value > UINT32_MAX) return FieldError(field, "does not fit 32 bits");
  return static_cast<uint32_t>(value);
}

StatusOr<std::string_view> AsString(const msgpack::object& object, std::string_view field) {
  return internal::AsString(object, kWhat, field);
}

// An array of uints (hashes), appended to *out.
Status DecodeHashes(const msgpack::object& value, std::string_view field,
                    std::vector<uint64_t>* out) {
  if (value.type != msgpack::type::ARRAY) return FieldError(field, "must be an array");
  out->reserve(out->size() + value.via.array.size);
  for (uint32_t j = 0; j < value.via.array.size; ++j) {
    KVINDEX_ASSIGN_OR_RETURN(uint64_t hash, AsUint(value.via.array.ptr[j], field));
    out->push_back(hash);
  }
  return Status();
}

std::optional<PlacementKind> KindFromName(std::string_view name) {
  for (int i = 0; i < kNumPlacementKinds; ++i) {
    const auto kind = static_cast<PlacementKind>(i);
    if (PlacementKindName(kind) == name) return kind;
  }
  return std::nullopt;
}

// One map of a heartbeat's "endpoints": {worker, dp_rank, model, address};
// unknown keys ignored.
StatusOr<SourceEndpoint> DecodeEndpoint(const msgpack::object& object) {
  if (object.type != msgpack::type::MAP) return FieldError(kEndpoints, "must hold maps");
  SourceEndpoint endpoint;
  bool has_worker = false;
  KVINDEX_RETURN_IF_ERROR(
      internal::ForEachStringKey(object, [&](std::string_view key, const msgpack::object& value) {
        if (key == kWorker) {
          KVINDEX_ASSIGN_OR_RETURN(std::string_view worker, AsString(value, key));
          endpoint.source.worker = std::string(worker);
          has_worker = true;
        } else if (key == kDpRank) {
          KVINDEX_ASSIGN_OR_RETURN(endpoint.source.dp_rank, AsUint32(value, key));
        } else if (key == kModel) {
          KVINDEX_ASSIGN_OR_RETURN(std::string_view model, AsString(value, key));
          endpoint.model = std::string(model);
        } else if (key == kAddress) {
          KVINDEX_ASSIGN_OR_RETURN(std::string_view address, AsString(value, key));
          endpoint.address = std::string(address);
        }
        return Status();
      }));
  if (!has_worker) return FieldError(kEndpoints, "entry without 'worker'");
  if (endpoint.address.empty() || endpoint.address.size() > kMaxAddressBytes ||
      endpoint.address.find(':') == std::string::npos) {
    return FieldError(kEndpoints, "entry without a 'host:port' address");
  }
  return endpoint;
}

// Returns nullopt (skip) for an unknown kind.
StatusOr<std::optional<PlacementEvent>> DecodeEvent(const msgpack::object& object) {
  if (object.type != msgpack::type::MAP) return FieldError(kEvents, "must hold maps");
  PlacementEvent event;
  bool has_kind = false;
  std::optional<std::string_view> tier_name;
  bool unknown_kind = false;  // then the rest of the map is not read
  KVINDEX_RETURN_IF_ERROR(internal::ForEachStringKey(object, [&](std::string_view key,
                                                                 const msgpack::object& value) {
    if (unknown_kind) return Status();
    if (key == kKind) {
      KVINDEX_ASSIGN_OR_RETURN(std::string_view name, AsString(value, key));
      const std::optional<PlacementKind> kind = KindFromName(name);
      unknown_kind = !kind.has_value();
      if (unknown_kind) return Status();
      event.kind = *kind;
      has_kind = true;
    } else if (key == kModel) {
      KVINDEX_ASSIGN_OR_RETURN(std::string_view model, AsString(value, key));
      event.model = std::string(model);
    } else if (key == kWorker) {
      KVINDEX_ASSIGN_OR_RETURN(std::string_view worker, AsString(value, key));
      event.source.worker = std::string(worker);
    } else if (key == kDpRank) {
      KVINDEX_ASSIGN_OR_RETURN(event.source.dp_rank, AsUint32(value, key));
    } else if (key == kAgent) {
      KVINDEX_ASSIGN_OR_RETURN(std::string_view agent, AsString(value, key));
      event.agent = std::string(agent);
    } else if (key == kEventId) {
      KVINDEX_ASSIGN_OR_RETURN(event.event_id, AsUint(value, key));
    } else if (key == kTimestamp) {
      KVINDEX_ASSIGN_OR_RETURN(event.timestamp_ns, AsUint(value, key));
    } else if (key == kTier) {
      KVINDEX_ASSIGN_OR_RETURN(tier_name, AsString(value, key));
    } else if (key == kBlockSize) {
      KVINDEX_ASSIGN_OR_RETURN(event.block_size, AsUint32(value, key));
    } else if (key == kParent) {
      if (value.type != msgpack::type::NIL) {
        KVINDEX_ASSIGN_OR_RETURN(event.parent_hash, AsUint(value, key));
      }
    } else if (key == kHashes) {
      KVINDEX_RETURN_IF_ERROR(DecodeHashes(value, key, &event.block_hashes));
    } else if (key == kSglangHashes) {
      // Checked here for its type; its count against `hashes` by its user
      // (compat::SglangAliasMap), which counts and ignores a mismatch.
      KVINDEX_RETURN_IF_ERROR(DecodeHashes(value, key, &event.sglang_hashes));
    } else if (key == kHeartbeatSeq) {
      KVINDEX_ASSIGN_OR_RETURN(event.heartbeat_seq, AsUint(value, key));
    } else if (key == kLeaseMs) {
      KVINDEX_ASSIGN_OR_RETURN(event.lease_ms, AsUint32(value, key));
    } else if (key == kSources) {
      if (value.type != msgpack::type::ARRAY) return FieldError(key, "must be an array");
      for (uint32_t j = 0; j < value.via.array.size; ++j) {
        const msgpack::object& pair = value.via.array.ptr[j];
        if (pair.type != msgpack::type::ARRAY || pair.via.array.size < 2) {
          return FieldError(key, "must hold [worker, dp_rank] pairs");
        }
        KVINDEX_ASSIGN_OR_RETURN(std::string_view worker, AsString(pair.via.array.ptr[0], key));
        KVINDEX_ASSIGN_OR_RETURN(uint32_t rank, AsUint32(pair.via.array.ptr[1], key));
        event.sources.push_back(SourceKey{std::string(worker), rank});
      }
    } else if (key == kEndpoints) {
      if (value.type != msgpack::type::ARRAY) return FieldError(key, "must be an array");
      for (uint32_t j = 0; j < value.via.array.size; ++j) {
        KVINDEX_ASSIGN_OR_RETURN(SourceEndpoint endpoint, DecodeEndpoint(value.via.array.ptr[j]));
        event.endpoints.push_back(std::move(endpoint));
      }
    }
    // Unknown keys: ignored (forward compatibility).
    return Status();
  }));
  if (unknown_kind) return std::optional<PlacementEvent>();
  if (!has_kind) return FieldError(kKind, "is missing");
  if (event.kind == PlacementKind::kStored || event.kind == PlacementKind::kRemoved) {
    if (!tier_name.has_value()) return FieldError(kTier, "is missing");
    const std::optional<Tier> tier = TierFromName(*tier_name);
    if (!tier.has_value()) return FieldError(kTier, "names no known tier");
    event.tier = *tier;
  }
  // Meaningful on stored events only (and written only there): ignored on
  // the others, as an unknown key is.
  if (event.kind != PlacementKind::kStored) event.sglang_hashes.clear();
  return std::optional<PlacementEvent>(std::move(event));
}

}  // namespace

void EncodePlacementBatch(std::span<const PlacementEvent> events, std::string* out,
                          const MessageHeader& header) {
  msgpack::sbuffer buffer(256 + events.size() * 64);
  Packer packer(buffer);
  const bool subject_seq = header.sequenced() && header.subject_seq != 0;
  packer.pack_map(header.sequenced() ? (subject_seq ? 6 : 5) : 2);
  PackString(packer, kVersion);
  packer.pack_uint32(kPlacementSchemaVersion);
  if (header.sequenced()) {
    PackString(packer, kAgent);
    PackString(packer, header.agent);
    PackString(packer, kIncarnation);
    packer.pack_uint64(header.incarnation);
    PackString(packer, kMsgSeq);
    packer.pack_uint64(header.msg_seq);
    if (subject_seq) {
      PackString(packer, kSubjectSeq);
      packer.pack_uint64(header.subject_seq);
    }
  }
  PackString(packer, kEvents);
  packer.pack_array(static_cast<uint32_t>(events.size()));
  for (const PlacementEvent& event : events) PackEvent(packer, event);
  out->assign(buffer.data(), buffer.size());
}

size_t EncodedEventBound(const PlacementEvent& event) {
  // The same fields, in the same cases, as PackEvent (the codec test checks
  // the bound against the encoding of every kind).
  const bool blocks = event.kind == PlacementKind::kStored || event.kind == PlacementKind::kRemoved;
  const bool stored = event.kind == PlacementKind::kStored;
  const bool heartbeat = event.kind == PlacementKind::kHeartbeat;
  const bool sglang = stored && !event.sglang_hashes.empty();
  size_t bytes = ContainerHeaderBytes(16);  // the map: 16 fields at most
  bytes += StringBytes(kKind) + StringBytes(PlacementKindName(event.kind));
  bytes += StringBytes(kModel) + StringBytes(event.model);
  bytes += StringBytes(kWorker) + StringBytes(event.source.worker);
  bytes += IntField(kDpRank) + StringBytes(kAgent) + StringBytes(event.agent);
  bytes += IntField(kEventId) + IntField(kTimestamp);
  if (blocks) {
    bytes += StringBytes(kTier) + StringBytes(TierName(event.tier));
    bytes += HashesField(kHashes, event.block_hashes.size());
  }
  if (stored) bytes += IntField(kBlockSize) + IntField(kParent);
  if (sglang) bytes += HashesField(kSglangHashes, event.sglang_hashes.size());
  if (heartbeat) {
    bytes +=
        IntField(kLeaseMs) + StringBytes(kSources) + ContainerHeaderBytes(event.sources.size());
    for (const SourceKey& source : event.sources) {
      bytes += ContainerHeaderBytes(2) + StringBytes(source.worker) + kIntBound;
    }
    if (!event.endpoints.empty()) {
      bytes += StringBytes(kEndpoints) + ContainerHeaderBytes(event.endpoints.size());
      for (const SourceEndpoint& endpoint : event.endpoints) {
        bytes += ContainerHeaderBytes(4) + StringBytes(kWorker) +
                 StringBytes(endpoint.source.worker) + IntField(kDpRank) + StringBytes(kModel) +
                 StringBytes(endpoint.model) + StringBytes(kAddress) +
                 StringBytes(endpoint.address);
      }
    }
  }
  if (event.kind == PlacementKind::kAgentExpired) bytes += IntField(kHeartbeatSeq);
  return bytes;
}

size_t EncodedHeaderBound(std::string_view agent) {
  // The map, version, agent, incarnation, msg_seq, subject_seq, and the
  // events array's header.
  return ContainerHeaderBytes(6) + IntField(kVersion) + StringBytes(kAgent) + StringBytes(agent) +
         IntField(kIncarnation) + IntField(kMsgSeq) + IntField(kSubjectSeq) + StringBytes(kEvents) +
         ContainerHeaderBytes(size_t{1} << 32);
}

StatusOr<DecodedPlacementBatch> DecodePlacementBatch(std::string_view bytes) {
  KVINDEX_ASSIGN_OR_RETURN(msgpack::object_handle handle,
                           internal::UnpackMap(bytes, kWhat, /*depth=*/16));
  const msgpack::object& root = handle.get();
  DecodedPlacementBatch batch;
  bool has_version = false;
  const msgpack::object* events = nullptr;
  KVINDEX_RETURN_IF_ERROR(
      internal::ForEachStringKey(root, [&](std::string_view key, const msgpack::object& value) {
        if (key == kVersion) {
          KVINDEX_ASSIGN_OR_RETURN(batch.version, AsUint32(value, key));
          has_version = true;
        } else if (key == kEvents) {
          if (value.type != msgpack::type::ARRAY) return FieldError(key, "must be an array");
          events = &value;
        } else if (key == kAgent) {
          KVINDEX_ASSIGN_OR_RETURN(std::string_view agent, AsString(value, key));
          batch.header.agent = std::string(agent);
        } else if (key == kIncarnation) {
          KVINDEX_ASSIGN_OR_RETURN(batch.header.incarnation, AsUint(value, key));
        } else if (key == kMsgSeq) {
          KVINDEX_ASSIGN_OR_RETURN(batch.header.msg_seq, AsUint(value, key));
        } else if (key == kSubjectSeq) {
          KVINDEX_ASSIGN_OR_RETURN(batch.header.subject_seq, AsUint(value, key));
        }
        return Status();
      }));
  if (!has_version) return FieldError(kVersion, "is missing");
  if (batch.version == 0) return FieldError(kVersion, "must be >= 1");
  if (events == nullptr) return FieldError(kEvents, "is missing");
  if (batch.header.sequenced() && batch.header.agent.empty()) {
    return FieldError(kAgent, "is missing in a sequenced message");
  }
  batch.events.reserve(events->via.array.size);
  for (uint32_t i = 0; i < events->via.array.size; ++i) {
    KVINDEX_ASSIGN_OR_RETURN(std::optional<PlacementEvent> event,
                             DecodeEvent(events->via.array.ptr[i]));
    if (event.has_value()) {
      batch.events.push_back(std::move(*event));
    } else {
      ++batch.skipped_unknown_kind;
    }
  }
  return batch;
}

}  // namespace kvindex::codec
