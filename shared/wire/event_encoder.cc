#include "shared/wire/event_encoder.h"

#include <array>

namespace kvindex::wire {
namespace {

void OptionalStr(const std::optional<std::string>& value, MsgpackWriter* w) {
  if (value.has_value()) {
    w->Str(*value);
  } else {
    w->Nil();
  }
}

void OptionalInt(const std::optional<int64_t>& value, MsgpackWriter* w) {
  if (value.has_value()) {
    w->Int(*value);
  } else {
    w->Nil();
  }
}

void Hashes(const std::vector<uint64_t>& hashes, HashEncoding encoding, MsgpackWriter* w) {
  w->ArrayHeader(static_cast<uint32_t>(hashes.size()));
  for (uint64_t hash : hashes) EncodeHash(hash, encoding, w);
}

void Parent(const WireEvent& event, HashEncoding encoding, MsgpackWriter* w) {
  if (event.parent_block_hash.has_value()) {
    EncodeHash(*event.parent_block_hash, encoding, w);
  } else {
    w->Nil();
  }
}

void Tokens(const WireEvent& event, MsgpackWriter* w) {
  const std::vector<uint32_t>& t = event.token_ids;
  if (!event.bigram) {
    w->ArrayHeader(static_cast<uint32_t>(t.size()));
    for (uint32_t token : t) w->Uint(token);
    return;
  }
  const size_t pairs = t.empty() ? 0 : t.size() - 1;
  w->ArrayHeader(static_cast<uint32_t>(pairs));
  for (size_t k = 0; k < pairs; ++k) {
    w->ArrayHeader(2);
    w->Uint(t[k]);
    w->Uint(t[k + 1]);
  }
}

void ExtraKeys(const WireEvent& event, MsgpackWriter* w) {
  if (!event.extra_keys_nils.has_value()) {
    w->Nil();
    return;
  }
  w->ArrayHeader(*event.extra_keys_nils);
  for (uint32_t k = 0; k < *event.extra_keys_nils; ++k) w->Nil();
}

void Header(uint32_t entries, const EncodeOptions& options, MsgpackWriter* w) {
  if (options.map16) {
    w->Map16Header(static_cast<uint16_t>(entries));
  } else {
    w->MapHeader(entries);
  }
}

void StoredMap(const WireEvent& e, const EncodeOptions& o, MsgpackWriter* w) {
  // Required fields (always written, possibly nil) then optional ones
  // (omitted when nil), in msgspec declaration order.
  uint32_t entries = 7 + (e.omit_block_size ? 0 : 1);
  entries += e.extra_keys_nils.has_value() + e.group_idx.has_value() +
             e.kv_cache_spec_kind.has_value() + e.kv_cache_spec_sliding_window.has_value() +
             e.locality.has_value() + e.ownership.has_value() + e.session_id.has_value() +
             e.cache_salt.has_value();
  entries += static_cast<uint32_t>(e.unknown_keys.size());
  Header(entries, o, w);
  w->Str("type");
  w->Str("BlockStored");
  w->Str("block_hashes");
  Hashes(e.block_hashes, o.hashes, w);
  w->Str("parent_block_hash");
  Parent(e, o.hashes, w);
  w->Str("token_ids");
  Tokens(e, w);
  if (!e.omit_block_size) {
    w->Str("block_size");
    w->Uint(e.block_size);
  }
  w->Str("lora_id");
  w->Nil();
  w->Str("medium");
  OptionalStr(e.medium, w);
  w->Str("lora_name");
  OptionalStr(e.lora_name, w);
  if (e.extra_keys_nils.has_value()) {
    w->Str("extra_keys");
    ExtraKeys(e, w);
  }
  if (e.group_idx.has_value()) {
    w->Str("group_idx");
    w->Int(*e.group_idx);
  }
  if (e.kv_cache_spec_kind.has_value()) {
    w->Str("kv_cache_spec_kind");
    w->Str(*e.kv_cache_spec_kind);
  }
  if (e.kv_cache_spec_sliding_window.has_value()) {
    w->Str("kv_cache_spec_sliding_window");
    w->Int(*e.kv_cache_spec_sliding_window);
  }
  const std::array<std::pair<const char*, const std::optional<std::string>*>, 4> tail = {{
      {"locality", &e.locality},
      {"ownership", &e.ownership},
      {"session_id", &e.session_id},
      {"cache_salt", &e.cache_salt},
  }};
  for (const auto& [key, value] : tail) {
    if (value->has_value()) {
      w->Str(key);
      w->Str(**value);
    }
  }
  for (const std::string& key : e.unknown_keys) {
    w->Str(key);
    w->Uint(1);
  }
}

void StoredArray(const WireEvent& e, const EncodeOptions& o, MsgpackWriter* w) {
  constexpr uint32_t kFields = 11;
  const uint32_t fields =
      o.array_fields == 0 || o.array_fields > kFields ? kFields : o.array_fields;
  w->ArrayHeader(1 + fields);
  w->Str("BlockStored");
  for (uint32_t k = 0; k < fields; ++k) {
    switch (k) {
      case 0:
        Hashes(e.block_hashes, o.hashes, w);
        break;
      case 1:
        Parent(e, o.hashes, w);
        break;
      case 2:
        Tokens(e, w);
        break;
      case 3:
        w->Uint(e.block_size);
        break;
      case 4:
        w->Nil();  // lora_id
        break;
      case 5:
        OptionalStr(e.medium, w);
        break;
      case 6:
        OptionalStr(e.lora_name, w);
        break;
      case 7:
        ExtraKeys(e, w);
        break;
      case 8:
        OptionalInt(e.group_idx, w);
        break;
      case 9:
        OptionalStr(e.kv_cache_spec_kind, w);
        break;
      case 10:
        OptionalInt(e.kv_cache_spec_sliding_window, w);
        break;
    }
  }
}

void RemovedMap(const WireEvent& e, const EncodeOptions& o, MsgpackWriter* w) {
  const uint32_t entries = 3 + e.group_idx.has_value() + e.locality.has_value() +
                           e.ownership.has_value() + static_cast<uint32_t>(e.unknown_keys.size());
  Header(entries, o, w);
  w->Str("type");
  w->Str("BlockRemoved");
  w->Str("block_hashes");
  Hashes(e.block_hashes, o.hashes, w);
  w->Str("medium");
  OptionalStr(e.medium, w);
  if (e.group_idx.has_value()) {
    w->Str("group_idx");
    w->Int(*e.group_idx);
  }
  if (e.locality.has_value()) {
    w->Str("locality");
    w->Str(*e.locality);
  }
  if (e.ownership.has_value()) {
    w->Str("ownership");
    w->Str(*e.ownership);
  }
  for (const std::string& key : e.unknown_keys) {
    w->Str(key);
    w->Uint(1);
  }
}

void RemovedArray(const WireEvent& e, const EncodeOptions& o, MsgpackWriter* w) {
  constexpr uint32_t kFields = 3;
  const uint32_t fields =
      o.array_fields == 0 || o.array_fields > kFields ? kFields : o.array_fields;
  w->ArrayHeader(1 + fields);
  w->Str("BlockRemoved");
  if (fields > 0) Hashes(e.block_hashes, o.hashes, w);
  if (fields > 1) OptionalStr(e.medium, w);
  if (fields > 2) OptionalInt(e.group_idx, w);
}

}  // namespace

void EncodeHash(uint64_t hash, HashEncoding encoding, MsgpackWriter* w) {
  switch (encoding) {
    case HashEncoding::kUint:
      w->Uint(hash);
      return;
    case HashEncoding::kSigned:
      w->Int64Fixed(static_cast<int64_t>(hash));
      return;
    case HashEncoding::kBin32:
    case HashEncoding::kStr32: {
      std::array<uint8_t, 32> bytes{};
      for (int k = 0; k < 24; ++k) bytes[k] = static_cast<uint8_t>(0xa5 ^ k);  // ignored prefix
      for (int k = 0; k < 8; ++k) bytes[24 + k] = static_cast<uint8_t>(hash >> (56 - 8 * k));
      if (encoding == HashEncoding::kBin32) {
        w->Bin(bytes);
      } else {
        w->Str({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
      }
      return;
    }
  }
}

void EncodeEvent(const WireEvent& event, const EncodeOptions& options, MsgpackWriter* w) {
  const bool map = options.form == EventForm::kMap;
  switch (event.type) {
    case EventType::kBlockStored:
      return map ? StoredMap(event, options, w) : StoredArray(event, options, w);
    case EventType::kBlockRemoved:
      return map ? RemovedMap(event, options, w) : RemovedArray(event, options, w);
    case EventType::kAllBlocksCleared:
      if (map) {
        Header(1, options, w);
        w->Str("type");
      } else {
        w->ArrayHeader(1);
      }
      w->Str("AllBlocksCleared");
      return;
    case EventType::kUnknown:
      if (map) {
        Header(2, options, w);
        w->Str("type");
        w->Str(event.tag);
        w->Str("block_hashes");
        w->ArrayHeader(0);
      } else {
        w->ArrayHeader(2);
        w->Str(event.tag);
        w->ArrayHeader(0);
      }
      return;
  }
}

void EncodeBatch(double ts, std::span<const WireEvent> events, std::optional<uint32_t> dp_rank,
                 const EncodeOptions& options, std::vector<uint8_t>* out) {
  MsgpackWriter w(out);
  w.ArrayHeader(options.two_element ? 2 : 3);
  w.Float64(ts);
  w.ArrayHeader(static_cast<uint32_t>(events.size()));
  for (const WireEvent& event : events) EncodeEvent(event, options, &w);
  if (!options.two_element) {
    if (dp_rank.has_value()) {
      w.Uint(*dp_rank);
    } else {
      w.Nil();
    }
  }
}

}  // namespace kvindex::wire
