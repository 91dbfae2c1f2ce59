// Two paths: a strict scanner for the common request shape (see FastParse),
// and simdjson's on-demand API for everything else, which also words every
// error. For a 1024-token body (6.3 KB) in one run: scanner 5.7-7.4 us,
// simdjson on-demand 9.1-9.8 us, simdjson DOM 10.8-11.1 us.
#include "shared/query/match_request.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <memory>
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

// The value of `len` (1..8) ASCII digits that end just before `end` (the 8
// bytes before `end` readable and, below the element, anything): the bytes
// below the element are masked off with the digits' low nibbles, then three
// multiply-shift steps combine pairs, quads and octets (no variable shift).
inline constexpr uint64_t kLowNibblesOfLast[9] = {
    0,
    0x0F00000000000000ull,
    0x0F0F000000000000ull,
    0x0F0F0F0000000000ull,
    0x0F0F0F0F00000000ull,
    0x0F0F0F0F0F000000ull,
    0x0F0F0F0F0F0F0000ull,
    0x0F0F0F0F0F0F0F00ull,
    0x0F0F0F0F0F0F0F0Full,
};
inline uint32_t DigitsEndingAt(const char* end, size_t len) {
  uint64_t t;
  std::memcpy(&t, end - 8, 8);
  t &= kLowNibblesOfLast[len];
  t = ((t * ((10 << 8) + 1)) >> 8) & 0x00FF00FF00FF00FFull;
  t = ((t * ((100 << 16) + 1)) >> 16) & 0x0000FFFF0000FFFFull;
  return static_cast<uint32_t>((t * ((uint64_t{10000} << 32) + 1)) >> 32);
}

#if defined(__SSE2__)
// Two numbers at once, as DigitsEndingAt: the 8 bytes before `end1` and
// before `end2` in one register, masked; then the same three steps in 16-
// and 32-bit lanes (SSE2: pmullw for the digit pairs, pmaddwd for the quads
// and the octets), and the two values stored at `out`.
inline void TwoDigitsEndingAt(const char* end1, size_t len1, const char* end2, size_t len2,
                              uint32_t* out) {
  const __m128i chunks =
      _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(end1 - 8)),
                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(end2 - 8)));
  const __m128i masks = _mm_unpacklo_epi64(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kLowNibblesOfLast[len1])),
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kLowNibblesOfLast[len2])));
  __m128i t = _mm_and_si128(chunks, masks);
  // 16-bit lanes: the low byte is the more significant digit.
  t = _mm_add_epi16(_mm_mullo_epi16(_mm_and_si128(t, _mm_set1_epi16(0xFF)), _mm_set1_epi16(10)),
                    _mm_srli_epi16(t, 8));
  t = _mm_madd_epi16(t, _mm_set1_epi32((1 << 16) | 100));  // quads, <= 9999
  t = _mm_packs_epi32(t, t);
  t = _mm_madd_epi16(t, _mm_set1_epi32((1 << 16) | 10000));  // octets
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), t);
}
#endif

// A thread's buffer for the elements being parsed: never value-initialized
// (the scanner writes every element it keeps), copied once into the caller's
// vector, so the output is neither zero-filled nor sized for the worst case.
// It is sized by the array's bound of one element per two bytes, and kept up
// to kKeep elements: enough for a 32k-token prompt (~190 KB of ids, a bound
// of ~95 K), which would otherwise allocate and free it on every call (with
// glibc's mmap threshold fixed at 128 KiB, as the reliability suite runs the
// routers, an mmap, a page fault per 4 KiB written and an munmap each time:
// twice the parse's own cost). Only the pages written are resident, so a
// thread holds what the longest array it parsed needed, at most 1 MiB.
// Larger buffers (a rare huge body) are not kept after the call.
class Scratch {
 public:
  uint32_t* Get(size_t n) {
    if (n > capacity_) {
      capacity_ = n <= kKeep ? std::max(n, std::min(2 * capacity_, kKeep)) : n;
      data_ = std::make_unique_for_overwrite<uint32_t[]>(capacity_);
    }
    return data_.get();
  }
  void Release() {
    if (capacity_ > kKeep) {
      data_.reset();
      capacity_ = 0;
    }
  }

 private:
  static constexpr size_t kKeep = 256 * 1024;  // elements (1 MiB)
  std::unique_ptr<uint32_t[]> data_;
  size_t capacity_ = 0;
};

// An element of `len` bytes known to be digits without a leading zero,
// ending just before `end` with 8 readable bytes before it: its value at
// *out, or false (empty, more than 10 digits, above UINT32_MAX).
inline bool DigitsElementEndingAt(const char* end, size_t len, uint32_t* out) {
  if (len - 1 < 8) {
    *out = DigitsEndingAt(end, len);
    return true;
  }
  return SlowU32Element(end - len, end, out);
}

// Writes parsed elements to a buffer sized in advance, through a pointer held
// in a register.
class ArrayWriter {
 public:
  ArrayWriter(uint32_t* data, size_t capacity) : data_(data), next_(data), end_(data + capacity) {}
  // The element in [a, b); `digits` says that every byte in it is a digit
  // (found 64 bytes at a time). 1..8 digits is the fast case.
  bool Element(const char* a, const char* b, bool digits) {
    if (next_ == end_) return false;
    const auto len = static_cast<size_t>(b - a);
    if (digits && len - 1 < 8 && (*a != '0' || len == 1)) {
      *next_++ = DigitsValue8(a, len);
      return true;
    }
    if (len - 1 < 8) {
      if (Digits8(a, len, next_)) {
        ++next_;
        return true;
      }
    }
    if (!SlowU32Element(a, b, next_)) return false;
    ++next_;
    return true;
  }
  // Room for `n` more elements.
  bool Room(size_t n) const { return static_cast<size_t>(end_ - next_) >= n; }
  // Where the next element goes, and the position after elements written
  // there directly (Room() checked).
  uint32_t* next() const { return next_; }
  void set_next(uint32_t* next) { next_ = next; }
  size_t count() const { return static_cast<size_t>(next_ - data_); }

 private:
  uint32_t* data_;
  uint32_t* next_;
  uint32_t* end_;
};

// `p` at '['; returns the position after ']'. Commas are located 64 bytes at
// a time (SSE2, part of the x86-64 baseline), so elements parse without a
// chain of dependent loads; the reads past ']' stay inside the padding, and
// no read goes below the array's first byte.
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
  const size_t capacity = std::min((n + 1) / 2, max_count);
  thread_local Scratch scratch;
  struct ReleaseOnReturn {
    ~ReleaseOnReturn() { scratch.Release(); }
  } release;
  uint32_t* const data = scratch.Get(capacity);
  ArrayWriter writer(data, capacity);
  size_t element_start = 0;
#if defined(__SSE2__)
  const __m128i comma = _mm_set1_epi8(',');
  const __m128i zero = _mm_set1_epi8('0');
  // x + (128 - '0') as a signed byte is below -118 exactly for '0'..'9'.
  const __m128i shift = _mm_set1_epi8(static_cast<char>(128 - '0'));
  const __m128i below = _mm_set1_epi8(static_cast<char>(-118));
  // Whether every byte of the previous block was a digit or a comma (an
  // element of up to 8 bytes spans at most two blocks).
  bool previous_clean = true;
  bool clean = true;
  // The comma mask of the previous block (the array's start counts as one).
  uint64_t previous_commas = uint64_t{1} << 63;
  uint64_t previous_leading_zero = 0;
  size_t block = 0;
  for (; block < n; block += 64) {
    uint64_t mask = 0;
    uint64_t digit = 0;
    uint64_t zeros = 0;
    for (int k = 0; k < 4; ++k) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + block + 16 * k));
      mask |=
          static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, comma))))
          << (16 * k);
      digit |= static_cast<uint64_t>(static_cast<uint32_t>(
                   _mm_movemask_epi8(_mm_cmplt_epi8(_mm_add_epi8(x, shift), below))))
               << (16 * k);
      zeros |=
          static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, zero))))
          << (16 * k);
    }
    const uint64_t in_array = n - block < 64 ? (uint64_t{1} << (n - block)) - 1 : ~uint64_t{0};
    mask &= in_array;
    previous_clean = clean;
    clean = ((mask | digit) & in_array) == in_array;
    // A '0' that starts an element (after a comma) and is not the whole of
    // it (not followed by a comma; the block's last byte counts as followed
    // by a digit): a leading zero, or a "0" just before the next block.
    const uint64_t starts = (mask << 1) | (previous_commas >> 63);
    const uint64_t leading_zero = zeros & starts & ~(mask >> 1);
    const uint64_t zero_here_or_before = leading_zero | previous_leading_zero;
    previous_commas = mask;
    previous_leading_zero = leading_zero;
    // The usual block (not the first one, so that 8 bytes before every
    // comma are inside the array): nothing but digits and commas in it and
    // in the block before (where its first element may start), no leading
    // zero in either, room for all its elements (at most 32: a digit and a
    // comma each); only the lengths are left to check.
    if (clean && previous_clean && block != 0 && zero_here_or_before == 0 && writer.Room(32)) {
      // Two elements at a time, through local pointers (kept in registers).
      const char* const at = base + block;
      const char* start = base + element_start;
      uint32_t* w = writer.next();
      while (mask != 0) {
        const char* const end1 = at + static_cast<unsigned>(__builtin_ctzll(mask));
        mask &= mask - 1;
        const size_t len1 = static_cast<size_t>(end1 - start);
        if (mask == 0) {
          if (!DigitsElementEndingAt(end1, len1, w)) return nullptr;
          ++w;
          start = end1 + 1;
          break;
        }
        const char* const end2 = at + static_cast<unsigned>(__builtin_ctzll(mask));
        mask &= mask - 1;
        const size_t len2 = static_cast<size_t>(end2 - end1 - 1);
        if (((len1 - 1) | (len2 - 1)) < 8) {
          TwoDigitsEndingAt(end1, len1, end2, len2, w);
        } else if (!DigitsElementEndingAt(end1, len1, w) ||
                   !DigitsElementEndingAt(end2, len2, w + 1)) {
          return nullptr;
        }
        w += 2;
        start = end2 + 1;
      }
      writer.set_next(w);
      element_start = static_cast<size_t>(start - base);
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
  out->assign(data, data + writer.count());
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
