// A bounds-checked, allocation-free cursor over msgpack bytes (internal).
//
// The batch decoder reads engine payloads with it straight from the frame
// buffer: every header is decoded in place, strings and bins are returned as
// views into the buffer, and nothing is ever copied or allocated. Only the
// subset of the msgpack spec that a value header needs is implemented here;
// what a value *means* is the decoder's business.
//
// Malformed input never reads out of bounds: every read checks the remaining
// length first and reports failure instead (the caller turns it into a
// decode error carrying offset()).
//
// Thread safety: a Reader is a value type used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace kvindex::wire::internal {

enum class MsgType : uint8_t {
  kNil,
  kBool,
  kUint,   // positive fixint, uint 8/16/32/64
  kInt,    // negative fixint, int 8/16/32/64 (the value may still be >= 0)
  kFloat,  // float 32/64
  kStr,
  kBin,
  kArray,
  kMap,
  kExt,  // fixext / ext: payload in data/count, opaque to kvindex
};

// "nil", "bool", "uint", ... for error messages.
inline const char* MsgTypeName(MsgType type) {
  switch (type) {
    case MsgType::kNil:
      return "nil";
    case MsgType::kBool:
      return "bool";
    case MsgType::kUint:
      return "uint";
    case MsgType::kInt:
      return "int";
    case MsgType::kFloat:
      return "float";
    case MsgType::kStr:
      return "str";
    case MsgType::kBin:
      return "bin";
    case MsgType::kArray:
      return "array";
    case MsgType::kMap:
      return "map";
    case MsgType::kExt:
      return "ext";
  }
  return "?";
}

// One decoded msgpack header. For kStr/kBin/kExt `data` points at `count`
// payload bytes inside the buffer; for kArray/kMap `count` is the number of
// elements / key-value pairs that follow.
struct Header {
  MsgType type = MsgType::kNil;
  uint32_t count = 0;
  uint64_t u = 0;  // kUint value; kBool 0/1
  int64_t i = 0;   // kInt value
  double f = 0;    // kFloat value
  const uint8_t* data = nullptr;

  std::string_view str() const { return {reinterpret_cast<const char*>(data), count}; }

  // Integer views that accept either encoding when the value fits.
  bool AsUint64(uint64_t* out) const {
    if (type == MsgType::kUint) {
      *out = u;
      return true;
    }
    if (type == MsgType::kInt && i >= 0) {
      *out = static_cast<uint64_t>(i);
      return true;
    }
    return false;
  }
  bool AsInt64(int64_t* out) const {
    if (type == MsgType::kInt) {
      *out = i;
      return true;
    }
    if (type == MsgType::kUint && u <= static_cast<uint64_t>(INT64_MAX)) {
      *out = static_cast<int64_t>(u);
      return true;
    }
    return false;
  }
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : begin_(data), p_(data), end_(data + size) {}

  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool at_end() const { return p_ == end_; }
  const uint8_t* position() const { return p_; }
  const uint8_t* end() const { return end_; }
  void Seek(const uint8_t* position) { p_ = position; }

  // Decodes the next header and advances past it (and past str/bin/ext
  // payloads, which are returned as views). False when truncated or when the
  // byte 0xc1 (never used) appears; the position is then unspecified.
  //
  // The forms of nearly every header outside token and hash arrays (positive
  // fixint, fixstr keys and values, nil) are decoded inline here; the rest
  // goes to NextSlow, which handles every form (same result, same position).
  __attribute__((always_inline)) bool Next(Header* h) {
    if (p_ < end_) {
      const uint8_t b = *p_;
      if (b <= 0x7f) {
        ++p_;
        h->type = MsgType::kUint;
        h->u = b;
        return true;
      }
      if ((b & 0xe0) == 0xa0) {
        ++p_;
        return Payload(h, MsgType::kStr, b & 0x1f);
      }
      if (b == 0xc0) {
        ++p_;
        h->type = MsgType::kNil;
        return true;
      }
    }
    return NextSlow(h);
  }

  // Next() for every form.
  __attribute__((noinline)) bool NextSlow(Header* h) {
    if (p_ >= end_) return false;
    const uint8_t b = *p_++;
    if (b <= 0x7f) {
      h->type = MsgType::kUint;
      h->u = b;
      return true;
    }
    if (b >= 0xe0) {
      h->type = MsgType::kInt;
      h->i = static_cast<int8_t>(b);
      return true;
    }
    if ((b & 0xf0) == 0x80) return Container(h, MsgType::kMap, b & 0x0f);
    if ((b & 0xf0) == 0x90) return Container(h, MsgType::kArray, b & 0x0f);
    if ((b & 0xe0) == 0xa0) return Payload(h, MsgType::kStr, b & 0x1f);
    switch (b) {
      case 0xc0:
        h->type = MsgType::kNil;
        return true;
      case 0xc2:
      case 0xc3:
        h->type = MsgType::kBool;
        h->u = b & 1;
        return true;
      case 0xc4:
        return SizedPayload<1>(h, MsgType::kBin);
      case 0xc5:
        return SizedPayload<2>(h, MsgType::kBin);
      case 0xc6:
        return SizedPayload<4>(h, MsgType::kBin);
      case 0xc7:
        return SizedExt<1>(h);
      case 0xc8:
        return SizedExt<2>(h);
      case 0xc9:
        return SizedExt<4>(h);
      case 0xca: {
        uint32_t bits;
        if (!ReadBe<4>(&bits)) return false;
        float value;
        std::memcpy(&value, &bits, sizeof(value));
        h->type = MsgType::kFloat;
        h->f = value;
        return true;
      }
      case 0xcb: {
        uint64_t bits;
        if (!ReadBe<8>(&bits)) return false;
        std::memcpy(&h->f, &bits, sizeof(h->f));
        h->type = MsgType::kFloat;
        return true;
      }
      case 0xcc:
        return UintOf<1>(h);
      case 0xcd:
        return UintOf<2>(h);
      case 0xce:
        return UintOf<4>(h);
      case 0xcf:
        return UintOf<8>(h);
      case 0xd0:
        return IntOf<int8_t, 1>(h);
      case 0xd1:
        return IntOf<int16_t, 2>(h);
      case 0xd2:
        return IntOf<int32_t, 4>(h);
      case 0xd3:
        return IntOf<int64_t, 8>(h);
      case 0xd4:
        return Payload(h, MsgType::kExt, 2);  // type byte + 1
      case 0xd5:
        return Payload(h, MsgType::kExt, 3);
      case 0xd6:
        return Payload(h, MsgType::kExt, 5);
      case 0xd7:
        return Payload(h, MsgType::kExt, 9);
      case 0xd8:
        return Payload(h, MsgType::kExt, 17);
      case 0xd9:
        return SizedPayload<1>(h, MsgType::kStr);
      case 0xda:
        return SizedPayload<2>(h, MsgType::kStr);
      case 0xdb:
        return SizedPayload<4>(h, MsgType::kStr);
      case 0xdc: {
        uint64_t n;
        if (!ReadBe<2>(&n)) return false;
        return Container(h, MsgType::kArray, static_cast<uint32_t>(n));
      }
      case 0xdd: {
        uint64_t n;
        if (!ReadBe<4>(&n)) return false;
        return Container(h, MsgType::kArray, static_cast<uint32_t>(n));
      }
      case 0xde: {
        uint64_t n;
        if (!ReadBe<2>(&n)) return false;
        return Container(h, MsgType::kMap, static_cast<uint32_t>(n));
      }
      case 0xdf: {
        uint64_t n;
        if (!ReadBe<4>(&n)) return false;
        return Container(h, MsgType::kMap, static_cast<uint32_t>(n));
      }
      default:  // 0xc1: never used
        return false;
    }
  }

  // Skips one complete value (any nesting, iteratively: hostile nesting depth
  // cannot overflow the stack). False when the value is truncated.
  bool Skip() {
    uint64_t pending = 1;
    Header h;
    while (pending > 0) {
      if (!Next(&h)) return false;
      --pending;
      if (h.type == MsgType::kArray) pending += h.count;
      if (h.type == MsgType::kMap) pending += 2ull * h.count;
    }
    return true;
  }

  // Fast path for the hottest loop (token ids): a non-negative integer that
  // fits in 32 bits. False (position unspecified) for anything else, so the
  // caller re-reads generically to report the error.
  bool NextUint32(uint32_t* out) {
    if (p_ >= end_) return false;
    const uint8_t b = *p_;
    if (b <= 0x7f) {
      *out = b;
      ++p_;
      return true;
    }
    const size_t left = remaining();
    if (b == 0xcd && left >= 3) {
      *out = (uint32_t{p_[1]} << 8) | p_[2];
      p_ += 3;
      return true;
    }
    if (b == 0xce && left >= 5) {
      *out = (uint32_t{p_[1]} << 24) | (uint32_t{p_[2]} << 16) | (uint32_t{p_[3]} << 8) | p_[4];
      p_ += 5;
      return true;
    }
    if (b == 0xcc && left >= 2) {
      *out = p_[1];
      p_ += 2;
      return true;
    }
    Header h;
    uint64_t value;
    if (!Next(&h) || !h.AsUint64(&value) || value > UINT32_MAX) return false;
    *out = static_cast<uint32_t>(value);
    return true;
  }

 private:
  bool Container(Header* h, MsgType type, uint32_t count) {
    // Every element takes at least one byte; a header that promises more
    // elements than bytes remain is truncated (fail early, not after a long
    // loop over a hostile count).
    const uint64_t min_bytes = type == MsgType::kMap ? 2ull * count : count;
    if (min_bytes > remaining()) return false;
    h->type = type;
    h->count = count;
    return true;
  }
  bool Payload(Header* h, MsgType type, uint64_t size) {
    if (size > remaining() || size > UINT32_MAX) return false;
    h->type = type;
    h->count = static_cast<uint32_t>(size);
    h->data = p_;
    p_ += size;
    return true;
  }
  template <int N>
  bool SizedPayload(Header* h, MsgType type) {
    uint64_t size;
    if (!ReadBe<N>(&size)) return false;
    return Payload(h, type, size);
  }
  template <int N>
  bool SizedExt(Header* h) {
    uint64_t size;
    if (!ReadBe<N>(&size)) return false;
    return Payload(h, MsgType::kExt, size + 1);  // + type byte
  }
  template <int N>
  bool UintOf(Header* h) {
    uint64_t value;
    if (!ReadBe<N>(&value)) return false;
    h->type = MsgType::kUint;
    h->u = value;
    return true;
  }
  template <typename T, int N>
  bool IntOf(Header* h) {
    uint64_t value;
    if (!ReadBe<N>(&value)) return false;
    h->type = MsgType::kInt;
    h->i = static_cast<T>(value);
    return true;
  }
  template <int N, typename T>
  bool ReadBe(T* out) {
    if (remaining() < N) return false;
    uint64_t value = 0;
    for (int k = 0; k < N; ++k) value = (value << 8) | p_[k];
    p_ += N;
    *out = static_cast<T>(value);
    return true;
  }

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace kvindex::wire::internal
