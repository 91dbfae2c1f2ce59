#include "services/bench/decode/tree_baseline.h"

#include <msgpack.hpp>
#include <string_view>

namespace kvindex::bench {
namespace {

uint64_t HashOf(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER:
      return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER:
      return static_cast<uint64_t>(o.via.i64);
    case msgpack::type::BIN:
    case msgpack::type::STR: {
      const auto* p = reinterpret_cast<const uint8_t*>(
          o.type == msgpack::type::BIN ? o.via.bin.ptr : o.via.str.ptr);
      const uint32_t n = o.type == msgpack::type::BIN ? o.via.bin.size : o.via.str.size;
      uint64_t v = 0;
      for (uint32_t k = n > 8 ? n - 8 : 0; k < n; ++k) v = (v << 8) | p[k];
      return v;
    }
    default:
      throw msgpack::type_error();
  }
}

std::optional<std::string> OptStr(const msgpack::object& o) {
  if (o.is_nil()) return std::nullopt;
  return o.as<std::string>();
}

std::optional<int64_t> OptInt(const msgpack::object& o) {
  if (o.is_nil()) return std::nullopt;
  return o.as<int64_t>();
}

void SetField(std::string_view key, const msgpack::object& v, OwnedEvent* e) {
  if (key == "type") {
    e->type = v.as<std::string>();
  } else if (key == "block_hashes") {
    e->hashes.clear();
    for (const msgpack::object& h : v.as<std::vector<msgpack::object>>())
      e->hashes.push_back(HashOf(h));
  } else if (key == "parent_block_hash") {
    e->parent = v.is_nil() ? std::nullopt : std::optional<uint64_t>(HashOf(v));
  } else if (key == "token_ids") {
    e->tokens = v.is_nil() ? std::vector<uint32_t>{} : v.as<std::vector<uint32_t>>();
  } else if (key == "block_size") {
    e->block_size = v.is_nil() ? 0 : v.as<uint32_t>();
  } else if (key == "medium") {
    e->medium = OptStr(v);
  } else if (key == "lora_name") {
    e->lora_name = OptStr(v);
  } else if (key == "cache_salt") {
    e->cache_salt = OptStr(v);
  } else if (key == "kv_cache_spec_kind") {
    e->spec_kind = OptStr(v);
  } else if (key == "locality") {
    e->locality = OptStr(v);
  } else if (key == "group_idx") {
    e->group_idx = OptInt(v);
  }
}

}  // namespace

Status TreeBaselineDecoder::Decode(std::span<const uint8_t> payload, wire::EngineBatch* batch) {
  *batch = wire::EngineBatch{};
  try {
    msgpack::object_handle handle =
        msgpack::unpack(reinterpret_cast<const char*>(payload.data()), payload.size());
    const msgpack::object& root = handle.get();
    if (root.type != msgpack::type::ARRAY || root.via.array.size < 2) {
      return absl::InvalidArgumentError("batch must be an array");
    }
    batch->ts = root.via.array.ptr[0].as<double>();
    const msgpack::object& events = root.via.array.ptr[1];
    if (events.type != msgpack::type::ARRAY) return absl::InvalidArgumentError("events");
    if (root.via.array.size >= 3 && !root.via.array.ptr[2].is_nil()) {
      batch->dp_rank = root.via.array.ptr[2].as<uint32_t>();
    }
    owned_.clear();
    owned_.resize(events.via.array.size);
    for (uint32_t k = 0; k < events.via.array.size; ++k) {
      const msgpack::object& ev = events.via.array.ptr[k];
      OwnedEvent& e = owned_[k];
      if (ev.type == msgpack::type::MAP) {
        for (uint32_t i = 0; i < ev.via.map.size; ++i) {
          const msgpack::object_kv& kv = ev.via.map.ptr[i];
          if (kv.key.type != msgpack::type::STR) continue;
          SetField({kv.key.via.str.ptr, kv.key.via.str.size}, kv.val, &e);
        }
      } else if (ev.type == msgpack::type::ARRAY && ev.via.array.size > 0) {
        static constexpr std::string_view kStored[] = {
            "type",      "block_hashes",      "parent_block_hash",
            "token_ids", "block_size",        "lora_id",
            "medium",    "lora_name",         "extra_keys",
            "group_idx", "kv_cache_spec_kind"};
        static constexpr std::string_view kRemoved[] = {"type", "block_hashes", "medium",
                                                        "group_idx"};
        e.type = ev.via.array.ptr[0].as<std::string>();
        std::span<const std::string_view> names = kStored;
        if (e.type == "BlockRemoved") names = kRemoved;
        for (uint32_t i = 1; i < ev.via.array.size && i < names.size(); ++i) {
          SetField(names[i], ev.via.array.ptr[i], &e);
        }
      } else {
        return absl::InvalidArgumentError("event must be a map or an array");
      }
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("msgpack: ") + e.what());
  }
  events_.clear();
  for (const OwnedEvent& o : owned_) {
    wire::EngineEvent& e = events_.emplace_back();
    e.tag = o.type;
    e.type = o.type == "BlockStored"        ? wire::EventType::kBlockStored
             : o.type == "BlockRemoved"     ? wire::EventType::kBlockRemoved
             : o.type == "AllBlocksCleared" ? wire::EventType::kAllBlocksCleared
                                            : wire::EventType::kUnknown;
    e.block_hashes = o.hashes;
    e.parent_block_hash = o.parent;
    e.token_ids = o.tokens;
    e.block_size = o.block_size;
    e.medium = o.medium;
    e.lora_name = o.lora_name;
    e.cache_salt = o.cache_salt;
    e.kv_cache_spec_kind = o.spec_kind;
    e.locality = o.locality;
    e.group_idx = o.group_idx;
  }
  batch->events = events_;
  return Status();
}

}  // namespace kvindex::bench
