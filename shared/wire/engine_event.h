// Decoded engine KV events: a view of one KVEventBatch as the engine sent it.
//
// The batch decoder (batch_decoder.h) fills these from a msgpack payload.
// Nothing here is normalized yet: hashes are engine hashes (worker-local),
// `medium` is the raw string, token ids are as sent (EAGLE bigram lists
// already flattened to firsts + last second, see TokenLayout). Turning them
// into placement events is shared/normalize's job.
//
// Lifetime: string views point into the payload buffer; spans point into the
// decoder's scratch. Both stay valid until the next BatchDecoder::Decode call
// and only while the payload buffer is alive. Copy what you keep.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvindex::wire {

enum class EventType : uint8_t {
  kBlockStored = 0,
  kBlockRemoved = 1,
  kAllBlocksCleared = 2,
  kUnknown = 3,  // a tag kvindex does not know (skipped and counted)
};
inline constexpr int kNumEventTypes = 4;

// "BlockStored", "BlockRemoved", "AllBlocksCleared", "unknown".
std::string_view EventTypeName(EventType type);

// How the event was encoded: tagged map (current engines) or tagged
// positional array (legacy vLLM, some producers).
enum class EventForm : uint8_t { kMap = 0, kArray = 1 };

// token_ids arrive as plain ints (kFlat) or, from SGLang with EAGLE
// speculative decoding, as [first, second] bigram pairs (kBigram). Bigram
// lists are flattened on decode to the pair firsts followed by the last
// pair's second (semantics.md section 2), so P pairs give P + 1 tokens and
// block i hashes the window [i*B, i*B + B + 1).
enum class TokenLayout : uint8_t { kFlat = 0, kBigram = 1 };

struct EngineEvent {
  EventType type = EventType::kUnknown;
  EventForm form = EventForm::kMap;
  // The tag as sent ("BlockStored", or the unknown tag; "" when a map event
  // has no "type" key).
  std::string_view tag;
  // Byte offset of the event inside the payload (diagnostics).
  uint32_t offset = 0;

  // BlockStored / BlockRemoved: engine hashes, normalized to uint64
  // (hash_value.h), in chain order.
  std::span<const uint64_t> block_hashes;

  // BlockStored only. -------------------------------------------------------
  std::optional<uint64_t> parent_block_hash;  // nullopt = nil (root)
  std::span<const uint32_t> token_ids;        // flattened, see TokenLayout
  TokenLayout token_layout = TokenLayout::kFlat;
  uint32_t block_size = 0;                     // missing or nil -> 0 (placeholder)
  std::optional<int64_t> lora_id;              // deprecated; decoded, never used
  std::optional<std::string_view> lora_name;   // local hash seed
  std::optional<std::string_view> cache_salt;  // SGLang; local hash seed
  // extra_keys: nil/absent -> has_extra_keys false. Per-block entries are
  // opaque (multimodal ids); only counted.
  bool has_extra_keys = false;
  uint32_t extra_keys_non_nil = 0;
  std::optional<std::string_view> kv_cache_spec_kind;
  std::optional<int64_t> kv_cache_spec_sliding_window;
  std::optional<std::string_view> session_id;  // map form only

  // BlockStored / BlockRemoved. ---------------------------------------------
  std::optional<std::string_view> medium;  // nullopt = nil/absent (GPU)
  std::optional<int64_t> group_idx;
  std::optional<std::string_view> locality;   // map form only
  std::optional<std::string_view> ownership;  // map form only

  // Keys of a known map event that kvindex does not know (ignored).
  uint32_t unknown_keys = 0;
};

struct EngineBatch {
  double ts = 0;  // seconds since the epoch (any msgpack number on the wire)
  // Third envelope element (data_parallel_rank / attn_dp_rank); nullopt when
  // nil or when the envelope has two elements (vLLM <= 0.9).
  std::optional<uint32_t> dp_rank;
  uint32_t envelope_size = 0;  // 2 or 3 (more are accepted and skipped)
  std::span<const EngineEvent> events;
  uint32_t unknown_events = 0;  // events with EventType::kUnknown
  uint32_t unknown_keys = 0;    // sum of events[i].unknown_keys
};

}  // namespace kvindex::wire
