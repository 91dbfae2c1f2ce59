// Encodes engine KV events the way the engines put them on the wire.
//
// Builds KVEventBatch payloads in either event form (map / legacy array),
// with any hash encoding (uint, SGLang int64, 32-byte bin or str), map16
// headers, 2-element envelopes and EAGLE bigram token lists. The field order
// and the nil-omission rules follow the engines' msgspec structs, so the
// golden vectors re-encode byte for byte (batch_decoder_test.cc pins that).
//
// For tests, benchmarks, fuzz seeds and simulators; the agent never encodes.
//
//   WireEvent stored{.type = EventType::kBlockStored, .block_hashes = {1, 2},
//                    .token_ids = tokens, .block_size = 16, .medium = "GPU"};
//   std::vector<uint8_t> payload;
//   EncodeBatch(1757500000.25, {&stored, 1}, 0u, {}, &payload);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shared/wire/engine_event.h"
#include "shared/wire/msgpack_writer.h"

namespace kvindex::wire {

enum class HashEncoding : uint8_t {
  kUint,    // smallest uint (vLLM default: cf + 8 bytes for large values)
  kSigned,  // d3 + 8 bytes, the bit pattern as int64 (SGLang)
  kBin32,   // bin8 of 32 bytes, value in the last 8 bytes big-endian
  kStr32,   // str8 of 32 bytes, likewise
};

struct WireEvent {
  EventType type = EventType::kBlockStored;
  std::string tag = {};  // written for EventType::kUnknown

  std::vector<uint64_t> block_hashes = {};
  std::optional<uint64_t> parent_block_hash = {};
  // Flat token ids. With `bigram`, the flattened EAGLE list (P + 1 tokens)
  // that is written as P pairs [t[i], t[i+1]].
  std::vector<uint32_t> token_ids = {};
  bool bigram = false;
  uint32_t block_size = 0;
  bool omit_block_size = false;  // map form: leave the key out
  std::optional<std::string> medium = {};
  std::optional<std::string> lora_name = {};
  std::optional<std::string> cache_salt = {};    // map form only (SGLang)
  std::optional<uint32_t> extra_keys_nils = {};  // extra_keys = [nil] * n
  std::optional<int64_t> group_idx = {};
  std::optional<std::string> kv_cache_spec_kind = {};
  std::optional<int64_t> kv_cache_spec_sliding_window = {};
  std::optional<std::string> locality = {};    // map form only
  std::optional<std::string> ownership = {};   // map form only
  std::optional<std::string> session_id = {};  // map form only
  std::vector<std::string> unknown_keys = {};  // map form: extra keys with value 1
};

struct EncodeOptions {
  EventForm form = EventForm::kMap;
  HashEncoding hashes = HashEncoding::kUint;
  bool map16 = false;         // map events with a map16 header
  bool two_element = false;   // envelope [ts, events] (vLLM <= 0.9)
  uint32_t array_fields = 0;  // array form: write only this many fields after the tag (0 = all)
};

void EncodeHash(uint64_t hash, HashEncoding encoding, MsgpackWriter* w);
void EncodeEvent(const WireEvent& event, const EncodeOptions& options, MsgpackWriter* w);

// Appends one payload [ts, [events...], dp_rank] to *out.
void EncodeBatch(double ts, std::span<const WireEvent> events, std::optional<uint32_t> dp_rank,
                 const EncodeOptions& options, std::vector<uint8_t>* out);

}  // namespace kvindex::wire
