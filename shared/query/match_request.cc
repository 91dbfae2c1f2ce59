// Two paths: a strict scanner for the common request shape (see FastParse),
// and simdjson's on-demand API for everything else, which also words every
// error. For a 1024-token body (6.3 KB) in one run: scanner 5.7-7.4 us,
// simdjson on-demand 9.1-9.8 us, simdjson DOM 10.8-11.1 us.
#include "shared/query/match_request.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string>
#include <vector>

namespace kvindex::query {
namespace {

namespace od = simdjson::ondemand;

Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

bool IsStructuralError(simdjson::error_code error) {
  return error == simdjson::TAPE_ERROR || error == simdjson::INCOMPLETE_ARRAY_OR_OBJECT ||
         error == simdjson::UNCLOSED_STRING || error == simdjson::UNESCAPED_CHARS ||
         error == simdjson::UTF8_ERROR || error == simdjson::STRING_ERROR ||
         error == simdjson::DEPTH_ERROR || error == simdjson::EMPTY ||
         error == simdjson::OUT_OF_BOUNDS;
}

Status InvalidJson(simdjson::error_code error) {
  return Invalid(std::string("invalid JSON: ") + simdjson::error_message(error));
}

// ---- Fast path --------------------------------------------------------
// Requests from routers almost always look the same: one flat object with a
// model name and a long array of small integers. FastParse handles exactly
// that shape with a strict hand-written scanner (SWAR parsing of up to 8
// digits at a time, no tape) and declines anything else -- escapes or
// non-ASCII bytes in strings, signs, fractions, exponents, leading zeros,
// numbers beyond u32, nested values, unknown or u64 fields, stray bytes --
// so simdjson then parses the body and produces the exact value or error.
// Inputs must be followed by at least 8 readable bytes (the body padding).

inline const char* SkipWs(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) ++p;
  return p;
}

// `p` at the opening quote; returns the position after the closing quote.
const char* FastString(const char* p, const char* end, std::string_view* out) {
  if (p >= end || *p != '"') return nullptr;
  const char* start = ++p;
  while (p < end) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"') {
      *out = std::string_view(start, static_cast<size_t>(p - start));
      return p + 1;
    }
    if (c == '\\' || c < 0x20 || c >= 0x80) return nullptr;
    ++p;
  }
  return nullptr;
}

inline bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The value of `len` (1..8) bytes at `a` known to be ASCII digits (8 bytes
// readable): digits to the top bytes (zeros below), then pairwise combine.
inline uint32_t DigitsValue8(const char* a, size_t len) {
  uint64_t chunk;
  std::memcpy(&chunk, a, 8);
  uint64_t t = (chunk ^ 0x3030303030303030ull) << (8 * (8 - len));
  t = (t * 10 + (t >> 8)) & 0x00FF00FF00FF00FFull;
  t = (t * 100 + (t >> 16)) & 0x0000FFFF0000FFFFull;
  return static_cast<uint32_t>((t * 10000 + (t >> 32)) & 0xFFFFFFFFull);
}

// The value of 1..8 ASCII digits at `a` (`len` of them; 8 bytes readable),
// or false when one of them is not a digit or there is a leading zero. SWAR:
// one 8-byte load, the digit check and three multiply steps.
inline bool Digits8(const char* a, size_t len, uint32_t* value) {
  uint64_t chunk;
  std::memcpy(&chunk, a, 8);
  const uint64_t x = chunk ^ 0x3030303030303030ull;  // a digit -> 0..9
  // High bit of a byte set unless it is 0..9 (no carries between bytes).
  const uint64_t nondigit =
      (((x & 0x7F7F7F7F7F7F7F7Full) + 0x7676767676767676ull) | x) & 0x8080808080808080ull;
  if ((nondigit & (~uint64_t{0} >> (64 - 8 * len))) != 0) return false;
  if ((x & 0xFF) == 0 && len > 1) return false;  // leading zero: not JSON
  *value = DigitsValue8(a, len);
  return true;
}

// Parses the digits of one array element in [a, b) (surrounding whitespace
// allowed): the general case behind ArrayWriter::Element.
inline bool SlowU32Element(const char* a, const char* b, uint32_t* out) {
  while (a < b && IsWs(*a)) ++a;
  while (b > a && IsWs(b[-1])) --b;
  const size_t len = static_cast<size_t>(b - a);
  if (len == 0 || len > 10) return false;
  if (len <= 8) return Digits8(a, len, out);
  if (*a == '0') return false;
  uint64_t value = 0;
  for (size_t i = 0; i < len; ++i) {
    if (a[i] < '0' || a[i] > '9') return false;
    value = value * 10 + static_cast<uint64_t>(a[i] - '0');
  }
  if (value > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(value);
  return true;
}

// Appends parsed elements to a vector sized in advance for all of them, so
// the hot loop stores through a pointer held in a register (push_back
// reloads and stores the vector's end on every element).
class ArrayWriter {
 public:
  ArrayWriter(std::vector<uint32_t>* out, size_t capacity) : out_(out) {
    out_->resize(capacity);
    data_ = out_->data();
    capacity_ = capacity;
  }
  // The element in [a, b); `digits` says that every byte in it is a digit
  // (found 64 bytes at a time). 1..8 digits is the fast case.
  bool Element(const char* a, const char* b, bool digits) {
    if (count_ == capacity_) return false;
    const auto len = static_cast<size_t>(b - a);
    if (digits && len - 1 < 8 && (*a != '0' || len == 1)) {
      data_[count_++] = DigitsValue8(a, len);
      return true;
    }
    if (len - 1 < 8) {
      if (Digits8(a, len, &data_[count_])) {
        ++count_;
        return true;
      }
    }
    if (!SlowU32Element(a, b, &data_[count_])) return false;
    ++count_;
    return true;
  }
  // Room for `n` more elements.
  bool Room(size_t n) const { return capacity_ - count_ >= n; }
  // An element of `len` bytes known to be digits, with Room() checked.
  bool DigitsElement(const char* a, size_t len) {
    if (len - 1 < 8 && (*a != '0' || len == 1)) {
      data_[count_++] = DigitsValue8(a, len);
      return true;
    }
    return Element(a, a + len, true);
  }
  void Finish() { out_->resize(count_); }

 private:
  std::vector<uint32_t>* out_;
  uint32_t* data_;
  size_t count_ = 0;
  size_t capacity_ = 0;
};

// Arrays up to this many bytes size the token vector for their largest
// possible element count (one digit and a comma each) in one go; for a
// larger body (up to the 8 MiB body limit) that would leave a thread's
// vector at twice its tokens' size, so the commas are counted first.

// Set bits of a 64-bit mask (the x86-64 baseline has no popcnt
// instruction; __builtin_popcountll would be a libgcc call).
inline size_t CountBits(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return static_cast<size_t>((x * 0x0101010101010101ull) >> 56);
}
constexpr size_t kPresizeArrayBytes = 256 * 1024;

// `p` at '['; returns the position after ']'. Commas are located 64 bytes at
// a time (SSE2, part of the x86-64 baseline), so elements parse without a
// chain of dependent loads; the reads past ']' stay inside the padding.
const char* FastU32Array(const char* p, const char* end, size_t max_count,
                         std::vector<uint32_t>* out) {
  if (p >= end || *p != '[') return nullptr;
  const char* const base = p + 1;
  const char* const close =
      static_cast<const char*>(std::memchr(base, ']', static_cast<size_t>(end - base)));
  if (close == nullptr) return nullptr;
  out->clear();
  if (SkipWs(base, close) == close) return close + 1;  // []
  const size_t n = static_cast<size_t>(close - base);
  // Elements are at most (n + 1) / 2; past max_count the request is refused
  // (simdjson words the error).
  size_t capacity = std::min((n + 1) / 2, max_count);
  if (n > kPresizeArrayBytes) {
    // Count the commas first (a big body is rare; the vector holds exactly
    // what it needs).
    size_t commas = 0;
    for (const char* c = base;
         (c = static_cast<const char*>(std::memchr(c, ',', static_cast<size_t>(close - c)))) !=
         nullptr;
         ++c) {
      ++commas;
    }
    capacity = std::min(commas + 1, max_count);
  }
  ArrayWriter writer(out, capacity);
  size_t element_start = 0;
#if defined(__SSE2__)
  const __m128i comma = _mm_set1_epi8(',');
  // x + (128 - '0') as a signed byte is below -118 exactly for '0'..'9'.
  const __m128i shift = _mm_set1_epi8(static_cast<char>(128 - '0'));
  const __m128i below = _mm_set1_epi8(static_cast<char>(-118));
  // Whether every byte of the previous block was a digit or a comma (an
  // element of up to 8 bytes spans at most two blocks).
  bool previous_clean = true;
  bool clean = true;
  size_t block = 0;
  for (; block < n; block += 64) {
    uint64_t mask = 0;
    uint64_t digit = 0;
    for (int k = 0; k < 4; ++k) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + block + 16 * k));
      mask |=
          static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, comma))))
          << (16 * k);
      digit |= static_cast<uint64_t>(static_cast<uint32_t>(
                   _mm_movemask_epi8(_mm_cmplt_epi8(_mm_add_epi8(x, shift), below))))
               << (16 * k);
    }
    const uint64_t in_array = n - block < 64 ? (uint64_t{1} << (n - block)) - 1 : ~uint64_t{0};
    mask &= in_array;
    previous_clean = clean;
    clean = ((mask | digit) & in_array) == in_array;
    if (clean && previous_clean && writer.Room(CountBits(mask))) {
      // The usual block: nothing but digits and commas around it, room for
      // all its elements; only lengths and leading zeros are left to check.
      while (mask != 0) {
        const size_t at = block + static_cast<size_t>(__builtin_ctzll(mask));
        mask &= mask - 1;
        if (!writer.DigitsElement(base + element_start, at - element_start)) return nullptr;
        element_start = at + 1;
      }
      continue;
    }
    while (mask != 0) {
      const size_t at = block + static_cast<size_t>(__builtin_ctzll(mask));
      mask &= mask - 1;
      if (!writer.Element(base + element_start, base + at,
                          clean && (element_start >= block || previous_clean))) {
        return nullptr;
      }
      element_start = at + 1;
    }
  }
  const bool last_clean = clean && (element_start >= block - 64 || previous_clean);
#else
  for (size_t at = 0; at < n; ++at) {
    if (base[at] != ',') continue;
    if (!writer.Element(base + element_start, base + at, false)) return nullptr;
    element_start = at + 1;
  }
  const bool last_clean = false;
#endif
  if (!writer.Element(base + element_start, close, last_clean)) return nullptr;
  writer.Finish();
  return close + 1;
}

// True when the body was fully parsed into *out (has_model set accordingly).
bool FastParse(std::string_view body, RequestDialect dialect, MatchRequest* out, bool* has_model) {
  const char* p = body.data();
  const char* const end = p + body.size();
  const std::string_view tokens_key = dialect == RequestDialect::kQuery ? "token_ids" : "tokens";
  p = SkipWs(p, end);
  if (p >= end || *p != '{') return false;
  p = SkipWs(p + 1, end);
  if (p < end && *p == '}') {
    p = SkipWs(p + 1, end);
    return p == end;
  }
  while (p < end) {
    std::string_view key;
    if ((p = FastString(p, end, &key)) == nullptr) return false;
    p = SkipWs(p, end);
    if (p >= end || *p != ':') return false;
    p = SkipWs(p + 1, end);
    if (key == "model" || (dialect == RequestDialect::kQuery && key == "model_name")) {
      std::string_view text;
      if ((p = FastString(p, end, &text)) == nullptr) return false;
      out->model.assign(text);
      *has_model = true;
    } else if ((key == "text" || key == "messages") && dialect == RequestDialect::kMatch) {
      return false;  // strings with escapes, chats: the simdjson path
    } else if (key == tokens_key) {
      if ((p = FastU32Array(p, end, kMaxTokens, &out->tokens)) == nullptr) return false;
      out->has_tokens = true;
    } else if (dialect == RequestDialect::kQuery && key == "block_size") {
      // 1..10 digits, no leading zero, at most u32: anything else declines.
      const char* digits = p;
      while (p < end && *p >= '0' && *p <= '9' && p - digits <= 10) ++p;
      const auto len = static_cast<size_t>(p - digits);
      if (len == 0 || len > 10 || (len > 1 && *digits == '0')) return false;
      uint64_t value = 0;
      for (size_t i = 0; i < len; ++i) value = value * 10 + static_cast<uint64_t>(digits[i] - '0');
      if (value > UINT32_MAX) return false;
      out->block_size = static_cast<uint32_t>(value);
      out->has_block_size = true;
    } else if (key == "lora_name" || key == "cache_salt" ||
               (dialect == RequestDialect::kQuery &&
                (key == "tenant_id" || key == "instance_id"))) {
      std::string* target = key == "lora_name"    ? &out->lora_name
                            : key == "cache_salt" ? &out->cache_salt
                            : key == "tenant_id"  ? &out->tenant_id
                                                  : &out->instance_id;
      if (end - p >= 4 && std::memcmp(p, "null", 4) == 0) {
        target->clear();
        p += 4;
      } else {
        std::string_view text;
        if ((p = FastString(p, end, &text)) == nullptr) return false;
        target->assign(text);
      }
    } else {
      return false;  // anything else: simdjson
    }
    p = SkipWs(p, end);
    if (p >= end) return false;
    if (*p == '}') {
      p = SkipWs(p + 1, end);
      return p == end;
    }
    if (*p != ',') return false;
    p = SkipWs(p + 1, end);
  }
  return false;
}

// ---- simdjson path ---------------------------------------------------------

template <typename T>
Status ReadUnsignedArray(od::value value, std::string_view field, uint64_t max, size_t max_count,
                         std::vector<T>* out) {
  od::array array;
  if (auto error = value.get_array().get(array); error != simdjson::SUCCESS) {
    if (IsStructuralError(error)) return InvalidJson(error);
    return Invalid("field '" + std::string(field) + "' must be an array of unsigned integers");
  }
  out->clear();
  size_t index = 0;
  for (auto element : array) {
    uint64_t number = 0;
    simdjson::error_code error = element.get_uint64().get(number);
    if (error != simdjson::SUCCESS || number > max) {
      if (IsStructuralError(error)) return InvalidJson(error);
      return Invalid("field '" + std::string(field) + "' element " + std::to_string(index) +
                     ": expected an unsigned " + (max == UINT32_MAX ? "32" : "64") +
                     "-bit integer");
    }
    if (index >= max_count) {
      return Invalid("field '" + std::string(field) + "' has more than " +
                     std::to_string(max_count) + " elements");
    }
    out->push_back(static_cast<T>(number));
    ++index;
  }
  return absl::OkStatus();
}

// Reads an optional string (null = absent).
Status ReadOptionalString(od::value value, std::string_view field, std::string* out) {
  od::json_type type;
  if (auto error = value.type().get(type); error != simdjson::SUCCESS) return InvalidJson(error);
  if (type == od::json_type::null) {
    // type() only peeks at the first byte; is_null() checks the whole atom.
    bool is_null = false;
    if (value.is_null().get(is_null) != simdjson::SUCCESS || !is_null) {
      return Invalid("invalid JSON: bad literal in field '" + std::string(field) + "'");
    }
    out->clear();
    return absl::OkStatus();
  }
  std::string_view text;
  if (type != od::json_type::string || value.get_string().get(text) != simdjson::SUCCESS) {
    return Invalid("field '" + std::string(field) + "' must be a string or null");
  }
  out->assign(text);
  return absl::OkStatus();
}

}  // namespace

void MatchRequest::Clear() {
  model.clear();
  has_tokens = has_local_hashes = has_text = has_messages = false;
  tokens.clear();
  text.clear();
  local_hashes.clear();
  has_seq_hashes = false;
  seq_hashes.clear();
  lora_name.clear();
  cache_salt.clear();
  max_blocks = 0;
  tenant_id.clear();
  instance_id.clear();
  block_size = 0;
  has_block_size = false;
}

// Semantic checks shared by both paths.
static Status Finish(RequestDialect dialect, bool has_model, MatchRequest* out) {
  if (!has_model || out->model.empty()) {
    return Invalid("missing field 'model' (a non-empty string)");
  }
  if (out->has_tokens && out->has_local_hashes) {
    return Invalid("give either 'tokens' or 'local_hashes', not both");
  }
  if (int{out->has_tokens} + int{out->has_local_hashes} + int{out->has_text} +
          int{out->has_messages} >
      1) {
    return Invalid("give one of 'tokens', 'local_hashes', 'text' or 'messages', not several");
  }
  if (!out->has_tokens && !out->has_local_hashes && !out->has_text && !out->has_messages) {
    return Invalid(dialect == RequestDialect::kQuery
                       ? std::string("missing field 'token_ids' (an array of u32)")
                       : std::string("missing field 'tokens' (an array of u32), 'local_hashes' "
                                     "(an array of u64), 'text' (a string) or 'messages' (an "
                                     "array of chat messages)"));
  }
  return absl::OkStatus();
}

static Status ParseWithSimdjson(std::string_view body, RequestDialect dialect, MatchRequest* out) {
  out->Clear();
  if (body.empty()) return Invalid("empty request body: expected a JSON object");
  thread_local od::parser parser;
  od::document doc;
  // The caller guarantees SIMDJSON_PADDING readable bytes after the body.
  simdjson::padded_string_view padded(body.data(), body.size(),
                                      body.size() + simdjson::SIMDJSON_PADDING);
  if (auto error = parser.iterate(padded).get(doc); error != simdjson::SUCCESS) {
    return InvalidJson(error);
  }
  od::object object;
  if (auto error = doc.get_object().get(object); error != simdjson::SUCCESS) {
    if (error == simdjson::INCORRECT_TYPE) return Invalid("request body must be a JSON object");
    return InvalidJson(error);
  }
  const std::string_view tokens_key = dialect == RequestDialect::kQuery ? "token_ids" : "tokens";
  bool has_model = false;
  for (auto field : object) {
    std::string_view key;
    if (auto error = field.unescaped_key().get(key); error != simdjson::SUCCESS) {
      return InvalidJson(error);
    }
    od::value value;
    if (auto error = field.value().get(value); error != simdjson::SUCCESS) {
      return InvalidJson(error);
    }
    if (key == "model" || (dialect == RequestDialect::kQuery && key == "model_name")) {
      std::string_view text;
      if (auto error = value.get_string().get(text); error != simdjson::SUCCESS) {
        if (IsStructuralError(error)) return InvalidJson(error);
        return Invalid("field '" + std::string(key) + "' must be a string");
      }
      out->model.assign(text);
      has_model = true;
    } else if (key == tokens_key) {
      KVINDEX_RETURN_IF_ERROR(
          ReadUnsignedArray(value, tokens_key, UINT32_MAX, kMaxTokens, &out->tokens));
      out->has_tokens = true;
    } else if (key == "text" && dialect == RequestDialect::kMatch) {
      std::string_view text;
      if (auto error = value.get_string().get(text); error != simdjson::SUCCESS) {
        if (IsStructuralError(error)) return InvalidJson(error);
        return Invalid("field 'text' must be a string");
      }
      out->text.assign(text);
      out->has_text = true;
    } else if (key == "messages" && dialect == RequestDialect::kMatch) {
      // Only checked here; the router parses the chat from the body.
      od::json_type type;
      if (auto error = value.type().get(type); error != simdjson::SUCCESS) {
        return InvalidJson(error);
      }
      if (type != od::json_type::array) return Invalid("field 'messages' must be an array");
      out->has_messages = true;
    } else if (key == "local_hashes" && dialect == RequestDialect::kMatch) {
      KVINDEX_RETURN_IF_ERROR(
          ReadUnsignedArray(value, "local_hashes", UINT64_MAX, kMaxTokens, &out->local_hashes));
      out->has_local_hashes = true;
    } else if (key == "lora_name") {
      KVINDEX_RETURN_IF_ERROR(ReadOptionalString(value, "lora_name", &out->lora_name));
    } else if (key == "cache_salt") {
      KVINDEX_RETURN_IF_ERROR(ReadOptionalString(value, "cache_salt", &out->cache_salt));
    } else if (dialect == RequestDialect::kQuery && (key == "tenant_id" || key == "instance_id")) {
      KVINDEX_RETURN_IF_ERROR(
          ReadOptionalString(value, key, key == "tenant_id" ? &out->tenant_id : &out->instance_id));
    } else if (dialect == RequestDialect::kQuery && key == "block_size") {
      od::json_type type;
      if (auto error = value.type().get(type); error != simdjson::SUCCESS)
        return InvalidJson(error);
      if (type == od::json_type::null) {
        bool is_null = false;
        if (value.is_null().get(is_null) != simdjson::SUCCESS || !is_null) {
          return Invalid("invalid JSON: bad literal in field 'block_size'");
        }
        continue;
      }
      uint64_t number = 0;
      if (value.get_uint64().get(number) != simdjson::SUCCESS || number > UINT32_MAX) {
        return Invalid("field 'block_size' must be an unsigned 32-bit integer");
      }
      out->block_size = static_cast<uint32_t>(number);
      out->has_block_size = true;
    } else if (dialect == RequestDialect::kQuery && key == "lora_id") {
      od::json_type type;
      bool is_null = false;
      if (value.type().get(type) != simdjson::SUCCESS || type != od::json_type::null ||
          value.is_null().get(is_null) != simdjson::SUCCESS || !is_null) {
        return Invalid("field 'lora_id' is deprecated and not supported: send 'lora_name'");
      }
    } else if (key == "max_blocks" && dialect == RequestDialect::kMatch) {
      uint64_t number = 0;
      if (value.get_uint64().get(number) != simdjson::SUCCESS || number > UINT32_MAX) {
        return Invalid("field 'max_blocks' must be an unsigned 32-bit integer");
      }
      out->max_blocks = static_cast<uint32_t>(number);
    }
    // Unknown fields are skipped by the iterator (forward compatibility).
  }
  // Anything after the root object is an error ("{...} x").
  if (doc.current_location().error() == simdjson::SUCCESS) {
    return Invalid("invalid JSON: trailing content after the object");
  }
  return Finish(dialect, has_model, out);
}

Status ParseMatchRequest(std::string_view body, RequestDialect dialect, MatchRequest* out) {
  if (body.empty()) return Invalid("empty request body: expected a JSON object");
  out->Clear();
  bool has_model = false;
  if (FastParse(body, dialect, out, &has_model)) return Finish(dialect, has_model, out);
  return ParseWithSimdjson(body, dialect, out);
}

bool FastParseU32Array(std::string_view json, size_t max_count, std::vector<uint32_t>* out) {
  const char* const end = json.data() + json.size();
  return !json.empty() && FastU32Array(json.data(), end, max_count, out) == end;
}

Status internal::ParseMatchRequestWithSimdjson(std::string_view body, RequestDialect dialect,
                                               MatchRequest* out) {
  if (body.empty()) return Invalid("empty request body: expected a JSON object");
  out->Clear();
  return ParseWithSimdjson(body, dialect, out);
}

}  // namespace kvindex::query
