#include "shared/wire/batch_decoder.h"
#include "shared/base/strings.h"

#include <array>
#include <cstring>
#include <string>
#include <type_traits>

#include "shared/wire/hash_value.h"
#include "shared/wire/internal/msgpack_reader.h"
#include "shared/wire/internal/token_scan.h"

namespace kvindex::wire {

std::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kBlockStored:
      return "BlockStored";
    case EventType::kBlockRemoved:
      return "BlockRemoved";
    case EventType::kAllBlocksCleared:
      return "AllBlocksCleared";
    case EventType::kUnknown:
      return "unknown";
  }
  return "unknown";
}

namespace {

using internal::Header;
using internal::MsgType;
using internal::MsgTypeName;
using internal::Reader;

// Every field name kvindex decodes (docs/wire-format.md section 3 tables).
enum class Field : uint8_t {
  kType,
  kBlockHashes,
  kParentBlockHash,
  kTokenIds,
  kBlockSize,
  kLoraId,
  kMedium,
  kLoraName,
  kExtraKeys,
  kGroupIdx,
  kSpecKind,
  kSlidingWindow,
  kLocality,
  kOwnership,
  kSessionId,
  kCacheSalt,
  kUnknown,
};

struct FieldName {
  std::string_view name;
  Field field;
};

constexpr FieldName kFieldNames[] = {
    {"type", Field::kType},
    {"block_hashes", Field::kBlockHashes},
    {"parent_block_hash", Field::kParentBlockHash},
    {"token_ids", Field::kTokenIds},
    {"block_size", Field::kBlockSize},
    {"lora_id", Field::kLoraId},
    {"medium", Field::kMedium},
    {"lora_name", Field::kLoraName},
    {"extra_keys", Field::kExtraKeys},
    {"group_idx", Field::kGroupIdx},
    {"kv_cache_spec_kind", Field::kSpecKind},
    {"kv_cache_spec_sliding_window", Field::kSlidingWindow},
    {"locality", Field::kLocality},
    {"ownership", Field::kOwnership},
    {"session_id", Field::kSessionId},
    {"cache_salt", Field::kCacheSalt},
};

// Per event, not per block; still, dispatch on the length first so that a
// key costs one or two comparisons instead of a scan of the table.
Field FieldFromName(std::string_view name) {
  switch (name.size()) {
    case 4:
      return name == "type" ? Field::kType : Field::kUnknown;
    case 6:
      return name == "medium" ? Field::kMedium : Field::kUnknown;
    case 7:
      return name == "lora_id" ? Field::kLoraId : Field::kUnknown;
    case 8:
      return name == "locality" ? Field::kLocality : Field::kUnknown;
    case 9:
      if (name == "token_ids") return Field::kTokenIds;
      if (name == "lora_name") return Field::kLoraName;
      if (name == "group_idx") return Field::kGroupIdx;
      if (name == "ownership") return Field::kOwnership;
      return Field::kUnknown;
    case 10:
      if (name == "block_size") return Field::kBlockSize;
      if (name == "extra_keys") return Field::kExtraKeys;
      if (name == "session_id") return Field::kSessionId;
      if (name == "cache_salt") return Field::kCacheSalt;
      return Field::kUnknown;
    case 12:
      return name == "block_hashes" ? Field::kBlockHashes : Field::kUnknown;
    case 17:
      return name == "parent_block_hash" ? Field::kParentBlockHash : Field::kUnknown;
    case 18:
      return name == "kv_cache_spec_kind" ? Field::kSpecKind : Field::kUnknown;
    case 28:
      return name == "kv_cache_spec_sliding_window" ? Field::kSlidingWindow : Field::kUnknown;
    default:
      return Field::kUnknown;
  }
}

std::string_view FieldLabel(Field field) {
  for (const FieldName& entry : kFieldNames) {
    if (entry.field == field) return entry.name;
  }
  return "?";
}

// Positional layout of the legacy array form, after the tag (declaration
// order of the engine's msgspec structs). Positions beyond these are ignored.
constexpr Field kStoredPositions[] = {
    Field::kBlockHashes, Field::kParentBlockHash, Field::kTokenIds,      Field::kBlockSize,
    Field::kLoraId,      Field::kMedium,          Field::kLoraName,      Field::kExtraKeys,
    Field::kGroupIdx,    Field::kSpecKind,        Field::kSlidingWindow,
};
constexpr Field kRemovedPositions[] = {Field::kBlockHashes, Field::kMedium, Field::kGroupIdx};

// Which map keys belong to which event (others are unknown keys: ignored).
bool FieldAllowed(EventType type, Field field) {
  if (type == EventType::kBlockStored) return field != Field::kUnknown;
  if (type == EventType::kBlockRemoved) {
    return field == Field::kBlockHashes || field == Field::kMedium || field == Field::kGroupIdx ||
           field == Field::kLocality || field == Field::kOwnership;
  }
  return false;
}

EventType EventTypeFromTag(std::string_view tag) {
  if (tag == "BlockStored") return EventType::kBlockStored;
  if (tag == "BlockRemoved") return EventType::kBlockRemoved;
  if (tag == "AllBlocksCleared") return EventType::kAllBlocksCleared;
  return EventType::kUnknown;
}

}  // namespace

// One Decode call: the cursor, the error, and the decoder's scratch.
class DecodeRun {
 public:
  DecodeRun(BatchDecoder& decoder, std::span<const uint8_t> payload)
      : d_(decoder), r_(payload.data(), payload.size()) {}

  bool Run(EngineBatch* batch);

  size_t error_offset() const { return error_offset_; }
  const std::string& error() const { return error_; }

 private:
  bool Fail(size_t offset, std::string message) {
    error_offset_ = offset;
    error_ = std::move(message);
    return false;
  }
  bool Truncated() { return Fail(r_.offset(), "truncated or malformed msgpack"); }
  bool WrongType(size_t offset, Field field, std::string_view want, const Header& got) {
    return Fail(offset, strings::Cat(FieldLabel(field), " must be ", want, ", got ",
                                     MsgTypeName(got.type)));
  }

  bool DecodeEvent(EngineBatch* batch);
  bool DecodeMapEvent(uint32_t pairs, EngineEvent* event, BatchDecoder::Slots* slots);
  bool DecodeArrayEvent(uint32_t count, EngineEvent* event, BatchDecoder::Slots* slots);
  bool DecodeField(Field field, EngineEvent* event, BatchDecoder::Slots* slots);
  bool DecodeHash(Field field, uint64_t* out);
  bool DecodeHashes(BatchDecoder::Slots* slots);
  bool DecodeTokens(EngineEvent* event, BatchDecoder::Slots* slots);
  uint32_t FastTokens(uint32_t* out, uint32_t n);
  bool DecodeOptionalStr(Field field, std::optional<std::string_view>* out);
  bool DecodeOptionalInt(Field field, std::optional<int64_t>* out);
  bool SkipValues(uint64_t count) {
    for (uint64_t k = 0; k < count; ++k) {
      if (!r_.Skip()) return Truncated();
    }
    return true;
  }

  BatchDecoder& d_;
  Reader r_;
  size_t error_offset_ = 0;
  std::string error_;
};

bool DecodeRun::Run(EngineBatch* batch) {
  Header h;
  if (!r_.Next(&h)) return Truncated();
  if (h.type != MsgType::kArray) {
    return Fail(
        0, strings::Cat("batch must be an array [ts, events, dp_rank], got ", MsgTypeName(h.type)));
  }
  const uint32_t envelope_size = h.count;
  if (envelope_size < 2) {
    return Fail(0, strings::Cat("batch array has ", envelope_size, " elements, want 2 or 3"));
  }
  batch->envelope_size = envelope_size;

  size_t offset = r_.offset();
  if (!r_.Next(&h)) return Truncated();
  if (h.type == MsgType::kFloat) {
    batch->ts = h.f;
  } else if (h.type == MsgType::kUint) {
    batch->ts = static_cast<double>(h.u);
  } else if (h.type == MsgType::kInt) {
    batch->ts = static_cast<double>(h.i);
  } else {
    return Fail(offset, strings::Cat("batch ts must be a number, got ", MsgTypeName(h.type)));
  }

  offset = r_.offset();
  if (!r_.Next(&h)) return Truncated();
  if (h.type != MsgType::kArray) {
    return Fail(offset, strings::Cat("batch events must be an array, got ", MsgTypeName(h.type)));
  }
  const uint32_t num_events = h.count;
  for (uint32_t k = 0; k < num_events; ++k) {
    if (!DecodeEvent(batch)) return false;
  }

  if (envelope_size >= 3) {
    offset = r_.offset();
    if (!r_.Next(&h)) return Truncated();
    uint64_t rank = 0;
    if (h.type == MsgType::kNil) {
      batch->dp_rank.reset();
    } else if (h.AsUint64(&rank) && rank <= UINT32_MAX) {
      batch->dp_rank = static_cast<uint32_t>(rank);
    } else {
      return Fail(offset,
                  strings::Cat("batch dp_rank must be a uint32 or nil, got ", MsgTypeName(h.type)));
    }
    // Elements after dp_rank are a future extension of the envelope: skipped.
    if (!SkipValues(envelope_size - 3)) return false;
  }
  if (!r_.at_end()) {
    return Fail(r_.offset(), strings::Cat(r_.remaining(), " trailing bytes after the batch"));
  }
  return true;
}

bool DecodeRun::DecodeEvent(EngineBatch* batch) {
  const size_t offset = r_.offset();
  Header h;
  if (!r_.Next(&h)) return Truncated();
  EngineEvent& event = d_.events_.emplace_back();
  BatchDecoder::Slots& slots = d_.slots_.emplace_back();
  event.offset = static_cast<uint32_t>(offset);
  bool ok;
  if (h.type == MsgType::kMap) {
    event.form = EventForm::kMap;
    ok = DecodeMapEvent(h.count, &event, &slots);
  } else if (h.type == MsgType::kArray) {
    event.form = EventForm::kArray;
    ok = DecodeArrayEvent(h.count, &event, &slots);
  } else {
    return Fail(offset, strings::Cat("event must be a map or an array, got ", MsgTypeName(h.type)));
  }
  if (!ok) return false;
  if (event.type == EventType::kUnknown) ++batch->unknown_events;
  batch->unknown_keys += event.unknown_keys;
  if ((event.type == EventType::kBlockStored || event.type == EventType::kBlockRemoved) &&
      slots.hash_count == UINT32_MAX) {
    return Fail(offset, strings::Cat(EventTypeName(event.type), " without block_hashes"));
  }
  return true;
}

bool DecodeRun::DecodeMapEvent(uint32_t pairs, EngineEvent* event, BatchDecoder::Slots* slots) {
  const uint8_t* const start = r_.position();
  Header h;
  // Find the tag. Engines write "type" first; other producers may not, so
  // fall back to a scan (the event is then read twice).
  bool have_tag = false;
  bool tag_was_first = false;
  for (uint32_t k = 0; k < pairs && !have_tag; ++k) {
    const uint8_t* key_start = r_.position();
    if (!r_.Next(&h)) return Truncated();
    if (h.type == MsgType::kStr && h.str() == "type") {
      const size_t offset = r_.offset();
      if (!r_.Next(&h)) return Truncated();
      if (h.type != MsgType::kStr) return WrongType(offset, Field::kType, "a str", h);
      event->tag = h.str();
      have_tag = true;
      tag_was_first = k == 0;
    } else {
      r_.Seek(key_start);
      if (!SkipValues(2)) return false;
    }
  }
  event->type = have_tag ? EventTypeFromTag(event->tag) : EventType::kUnknown;
  if (event->type == EventType::kUnknown) {
    // Unknown tag (or no tag at all): skip the whole event; counted by the caller.
    r_.Seek(start);
    return SkipValues(2ull * pairs);
  }
  uint32_t first = 0;
  if (tag_was_first) {
    first = 1;
  } else {
    r_.Seek(start);
  }
  slots->hash_count = UINT32_MAX;  // "block_hashes not seen yet"
  for (uint32_t k = first; k < pairs; ++k) {
    const uint8_t* key_start = r_.position();
    if (!r_.Next(&h)) return Truncated();
    if (h.type != MsgType::kStr) {
      // A non-string key is no field of ours: skip key and value.
      r_.Seek(key_start);
      if (!SkipValues(2)) return false;
      ++event->unknown_keys;
      continue;
    }
    const Field field = FieldFromName(h.str());
    if (field == Field::kType) {
      if (!SkipValues(1)) return false;  // the tag, already read
    } else if (FieldAllowed(event->type, field)) {
      if (!DecodeField(field, event, slots)) return false;
    } else {
      if (!SkipValues(1)) return false;
      ++event->unknown_keys;
    }
  }
  return true;
}

bool DecodeRun::DecodeArrayEvent(uint32_t count, EngineEvent* event, BatchDecoder::Slots* slots) {
  const size_t offset = r_.offset();
  if (count == 0) return Fail(offset, "event array is empty (no tag)");
  Header h;
  if (!r_.Next(&h)) return Truncated();
  if (h.type != MsgType::kStr) return WrongType(offset, Field::kType, "a str", h);
  event->tag = h.str();
  event->type = EventTypeFromTag(event->tag);
  std::span<const Field> positions;
  if (event->type == EventType::kBlockStored) positions = kStoredPositions;
  if (event->type == EventType::kBlockRemoved) positions = kRemovedPositions;
  if (!positions.empty()) slots->hash_count = UINT32_MAX;
  for (uint32_t k = 1; k < count; ++k) {
    if (k - 1 < positions.size()) {
      if (!DecodeField(positions[k - 1], event, slots)) return false;
    } else if (!SkipValues(1)) {
      return false;
    }
  }
  return true;
}

bool DecodeRun::DecodeField(Field field, EngineEvent* event, BatchDecoder::Slots* slots) {
  switch (field) {
    case Field::kBlockHashes:
      return DecodeHashes(slots);
    case Field::kParentBlockHash: {
      if (r_.remaining() > 0 && *r_.position() == 0xc0) {
        r_.Seek(r_.position() + 1);
        event->parent_block_hash.reset();
        return true;
      }
      uint64_t value = 0;
      if (!DecodeHash(field, &value)) return false;
      event->parent_block_hash = value;
      return true;
    }
    case Field::kTokenIds:
      return DecodeTokens(event, slots);
    case Field::kBlockSize: {
      const size_t offset = r_.offset();
      Header h;
      if (!r_.Next(&h)) return Truncated();
      uint64_t value = 0;
      if (h.type == MsgType::kNil) {
        event->block_size = 0;
      } else if (h.AsUint64(&value) && value <= UINT32_MAX) {
        event->block_size = static_cast<uint32_t>(value);
      } else {
        return WrongType(offset, field, "a uint32 or nil", h);
      }
      return true;
    }
    case Field::kLoraId:  // deprecated and unused, but typed: int or nil
      return DecodeOptionalInt(field, &event->lora_id);
    case Field::kMedium:
      return DecodeOptionalStr(field, &event->medium);
    case Field::kLoraName:
      return DecodeOptionalStr(field, &event->lora_name);
    case Field::kExtraKeys: {
      const size_t offset = r_.offset();
      Header h;
      if (!r_.Next(&h)) return Truncated();
      if (h.type == MsgType::kNil) {
        event->has_extra_keys = false;
        event->extra_keys_non_nil = 0;
        return true;
      }
      if (h.type != MsgType::kArray) return WrongType(offset, field, "an array or nil", h);
      event->has_extra_keys = true;
      event->extra_keys_non_nil = 0;
      // [tuple or nil]: each entry is an array (opaque contents) or nil.
      for (uint32_t k = 0; k < h.count; ++k) {
        const size_t entry_offset = r_.offset();
        const uint8_t* entry_start = r_.position();
        Header entry;
        if (!r_.Next(&entry)) return Truncated();
        if (entry.type == MsgType::kNil) continue;
        if (entry.type != MsgType::kArray) {
          return WrongType(entry_offset, field, "a list of arrays or nils", entry);
        }
        ++event->extra_keys_non_nil;
        r_.Seek(entry_start);
        if (!SkipValues(1)) return false;
      }
      return true;
    }
    case Field::kGroupIdx:
      return DecodeOptionalInt(field, &event->group_idx);
    case Field::kSpecKind:
      return DecodeOptionalStr(field, &event->kv_cache_spec_kind);
    case Field::kSlidingWindow:
      return DecodeOptionalInt(field, &event->kv_cache_spec_sliding_window);
    case Field::kLocality:
      return DecodeOptionalStr(field, &event->locality);
    case Field::kOwnership:
      return DecodeOptionalStr(field, &event->ownership);
    case Field::kSessionId:
      return DecodeOptionalStr(field, &event->session_id);
    case Field::kCacheSalt:
      return DecodeOptionalStr(field, &event->cache_salt);
    case Field::kType:
    case Field::kUnknown:
      return SkipValues(1);
  }
  return SkipValues(1);
}

bool DecodeRun::DecodeHash(Field field, uint64_t* out) {
  const size_t offset = r_.offset();
  Header h;
  if (!r_.Next(&h)) return Truncated();
  switch (h.type) {
    case MsgType::kUint:
      *out = h.u;
      return true;
    case MsgType::kInt:
      *out = HashFromSigned(h.i);
      return true;
    case MsgType::kBin:
    case MsgType::kStr:
      *out = HashFromBytes(h.data, h.count);
      return true;
    default:
      return WrongType(offset, field, "an int, bin or str hash", h);
  }
}

bool DecodeRun::DecodeHashes(BatchDecoder::Slots* slots) {
  const size_t offset = r_.offset();
  Header h;
  if (!r_.Next(&h)) return Truncated();
  if (h.type != MsgType::kArray) return WrongType(offset, Field::kBlockHashes, "an array", h);
  std::vector<uint64_t>& hashes = d_.hashes_;
  const size_t begin = hashes.size();
  hashes.resize(begin + h.count);  // bounded: Next() checked count <= remaining bytes
  uint64_t* out = hashes.data() + begin;
  // Engines hash with 64-bit digests: almost every hash is a `cf` uint64.
  // Take a run of those with one check per element (same result as
  // DecodeHash: a kUint value as is); anything else, or the last 8 bytes of
  // the buffer, goes through the checked generic path.
  const uint8_t* p = r_.position();
  const uint8_t* const end = r_.end();
  uint32_t k = 0;
  while (k < h.count && end - p >= 9 && p[0] == 0xcf) {
    uint64_t x;
    std::memcpy(&x, p + 1, sizeof(x));
    out[k++] = __builtin_bswap64(x);
    p += 9;
  }
  r_.Seek(p);
  for (; k < h.count; ++k) {
    if (!DecodeHash(Field::kBlockHashes, &out[k])) return false;
  }
  slots->hash_begin = static_cast<uint32_t>(begin);
  slots->hash_count = h.count;
  return true;
}

namespace {
// How far ahead of the cursor a payload is prefetched when decoding starts.
constexpr size_t kPrefetchBytes = 1024;
}  // namespace

// The bulk of every payload: internal/token_scan.h.
uint32_t DecodeRun::FastTokens(uint32_t* out, uint32_t n) {
  const uint8_t* p = r_.position();
  const uint32_t k = internal::ScanTokens(&p, r_.end(), out, n);
  r_.Seek(p);
  return k;
}

bool DecodeRun::DecodeTokens(EngineEvent* event, BatchDecoder::Slots* slots) {
  const size_t offset = r_.offset();
  Header h;
  if (!r_.Next(&h)) return Truncated();
  std::vector<uint32_t>& tokens = d_.tokens_;
  const size_t begin = tokens.size();
  slots->token_begin = static_cast<uint32_t>(begin);
  slots->token_count = 0;
  event->token_layout = TokenLayout::kFlat;
  if (h.type == MsgType::kNil) return true;  // required field sent as nil: no tokens
  if (h.type != MsgType::kArray) return WrongType(offset, Field::kTokenIds, "an array or nil", h);
  const uint32_t n = h.count;
  if (n == 0) return true;
  const uint8_t first = *r_.position();  // n > 0 guarantees a byte
  const bool bigram = (first & 0xf0) == 0x90 || first == 0xdc || first == 0xdd;
  if (!bigram) {
    tokens.resize(begin + n);
    uint32_t* out = tokens.data() + begin;
    uint32_t k = FastTokens(out, n);
    for (; k < n; ++k) {
      const size_t token_offset = r_.offset();
      const uint8_t* token_start = r_.position();
      if (!r_.NextUint32(&out[k])) {
        r_.Seek(token_start);
        Header bad;
        if (!r_.Next(&bad)) return Truncated();
        return Fail(token_offset,
                    strings::Cat("token_ids entries must be uint32, got ", MsgTypeName(bad.type)));
      }
    }
    slots->token_count = n;
    return true;
  }
  // EAGLE bigrams: [[a0, b0], [a1, b1], ...] -> a0, a1, ..., a_{n-1}, b_{n-1}.
  event->token_layout = TokenLayout::kBigram;
  tokens.resize(begin + n + 1);
  uint32_t* out = tokens.data() + begin;
  uint32_t second = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const size_t pair_offset = r_.offset();
    Header pair;
    if (!r_.Next(&pair)) return Truncated();
    if (pair.type != MsgType::kArray || pair.count != 2 || !r_.NextUint32(&out[k]) ||
        !r_.NextUint32(&second)) {
      return Fail(pair_offset, "token_ids bigram entries must be [uint32, uint32]");
    }
  }
  out[n] = second;
  slots->token_count = n + 1;
  return true;
}

bool DecodeRun::DecodeOptionalStr(Field field, std::optional<std::string_view>* out) {
  const size_t offset = r_.offset();
  Header h;
  if (!r_.Next(&h)) return Truncated();
  if (h.type == MsgType::kNil) {
    out->reset();
  } else if (h.type == MsgType::kStr) {
    *out = h.str();
  } else {
    return WrongType(offset, field, "a str or nil", h);
  }
  return true;
}

bool DecodeRun::DecodeOptionalInt(Field field, std::optional<int64_t>* out) {
  const size_t offset = r_.offset();
  Header h;
  if (!r_.Next(&h)) return Truncated();
  int64_t value = 0;
  if (h.type == MsgType::kNil) {
    out->reset();
  } else if (h.AsInt64(&value)) {
    *out = value;
  } else {
    return WrongType(offset, field, "an int or nil", h);
  }
  return true;
}

Status BatchDecoder::Decode(std::span<const uint8_t> payload, EngineBatch* batch) {
  events_.clear();
  slots_.clear();
  hashes_.clear();
  tokens_.clear();
  *batch = EngineBatch{};
  error_offset_ = 0;
  // Payloads often arrive cold (a large or long-queued frame): start the
  // loads of the first KB now so that their misses overlap instead of coming
  // one by one as the cursor reaches them. Prefetches never fault.
  const size_t prefetch = payload.size() < kPrefetchBytes ? payload.size() : kPrefetchBytes;
  for (size_t off = 0; off < prefetch; off += 64) __builtin_prefetch(payload.data() + off);
  DecodeRun run(*this, payload);
  if (!run.Run(batch)) {
    events_.clear();
    slots_.clear();
    *batch = EngineBatch{};
    error_offset_ = run.error_offset();
    return absl::InvalidArgumentError(strings::Cat("byte ", run.error_offset(), ": ", run.error()));
  }
  // The scratch vectors no longer grow: turn the slots into spans.
  for (size_t k = 0; k < events_.size(); ++k) {
    const Slots& slots = slots_[k];
    EngineEvent& event = events_[k];
    if (slots.hash_count != UINT32_MAX && slots.hash_count > 0) {
      event.block_hashes = {hashes_.data() + slots.hash_begin, slots.hash_count};
    }
    if (slots.token_count > 0) {
      event.token_ids = {tokens_.data() + slots.token_begin, slots.token_count};
    }
  }
  batch->events = events_;
  return Status();
}

}  // namespace kvindex::wire
