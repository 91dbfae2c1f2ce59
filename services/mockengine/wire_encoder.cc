#include "services/mockengine/wire_encoder.h"

#include <msgpack.hpp>

namespace kvindex::mockengine {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackHash(Packer& p, WireForm form, uint64_t hash) {
  if (form == WireForm::kSglangMap) {
    p.pack_int64(static_cast<int64_t>(hash));  // SGLang: signed, often negative
  } else {
    p.pack_uint64(hash);
  }
}

void PackHashes(Packer& p, WireForm form, const std::vector<uint64_t>& hashes) {
  p.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) PackHash(p, form, h);
}

void PackTokens(Packer& p, const std::vector<uint32_t>& tokens) {
  p.pack_array(static_cast<uint32_t>(tokens.size()));
  for (uint32_t t : tokens) p.pack_uint32(t);
}

void PackParent(Packer& p, WireForm form, const std::optional<uint64_t>& parent) {
  if (parent.has_value()) {
    PackHash(p, form, *parent);
  } else {
    p.pack_nil();
  }
}

void PackMapEvent(Packer& p, WireForm form, const MockEvent& e) {
  switch (e.type) {
    case MockEvent::Type::kStored:
      p.pack_map(8);
      PackStr(p, "type");
      PackStr(p, "BlockStored");
      PackStr(p, "block_hashes");
      PackHashes(p, form, e.block_hashes);
      PackStr(p, "parent_block_hash");
      PackParent(p, form, e.parent_hash);
      PackStr(p, "token_ids");
      PackTokens(p, e.token_ids);
      PackStr(p, "block_size");
      p.pack_uint32(e.block_size);
      PackStr(p, "lora_id");
      p.pack_nil();
      PackStr(p, "medium");
      PackStr(p, e.medium);
      PackStr(p, "lora_name");
      p.pack_nil();
      break;
    case MockEvent::Type::kRemoved:
      p.pack_map(3);
      PackStr(p, "type");
      PackStr(p, "BlockRemoved");
      PackStr(p, "block_hashes");
      PackHashes(p, form, e.block_hashes);
      PackStr(p, "medium");
      PackStr(p, e.medium);
      break;
    case MockEvent::Type::kCleared:
      p.pack_map(1);
      PackStr(p, "type");
      PackStr(p, "AllBlocksCleared");
      break;
  }
}

void PackArrayEvent(Packer& p, WireForm form, const MockEvent& e) {
  switch (e.type) {
    case MockEvent::Type::kStored:
      p.pack_array(12);
      PackStr(p, "BlockStored");
      PackHashes(p, form, e.block_hashes);
      PackParent(p, form, e.parent_hash);
      PackTokens(p, e.token_ids);
      p.pack_uint32(e.block_size);
      p.pack_nil();  // lora_id
      PackStr(p, e.medium);
      p.pack_nil();  // lora_name
      p.pack_nil();  // extra_keys
      p.pack_nil();  // group_idx
      p.pack_nil();  // kv_cache_spec_kind
      p.pack_nil();  // kv_cache_spec_sliding_window
      break;
    case MockEvent::Type::kRemoved:
      p.pack_array(4);
      PackStr(p, "BlockRemoved");
      PackHashes(p, form, e.block_hashes);
      PackStr(p, e.medium);
      p.pack_nil();  // group_idx
      break;
    case MockEvent::Type::kCleared:
      p.pack_array(1);
      PackStr(p, "AllBlocksCleared");
      break;
  }
}

}  // namespace

bool ParseWireForm(std::string_view name, WireForm* form) {
  if (name == "vllm-map") {
    *form = WireForm::kVllmMap;
  } else if (name == "vllm-array") {
    *form = WireForm::kVllmArray;
  } else if (name == "sglang") {
    *form = WireForm::kSglangMap;
  } else {
    return false;
  }
  return true;
}

std::string EncodeBatch(WireForm form, double timestamp_s, std::span<const MockEvent> events,
                        uint32_t dp_rank) {
  msgpack::sbuffer buffer(1024);
  Packer p(buffer);
  p.pack_array(3);
  p.pack_double(timestamp_s);
  p.pack_array(static_cast<uint32_t>(events.size()));
  for (const MockEvent& e : events) {
    if (form == WireForm::kVllmArray) {
      PackArrayEvent(p, form, e);
    } else {
      PackMapEvent(p, form, e);
    }
  }
  p.pack_uint32(dp_rank);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvindex::mockengine
