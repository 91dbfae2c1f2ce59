// Little helpers for the project's own binary records (checkpoints, saved
// ingest state): LEB128 varints, little-endian fixed 64-bit values,
// length-prefixed strings, and a bounds-checked reader whose every failure is
// DataLoss naming the record and the field.
//
//   std::string out;
//   bytes::PutVarint(&out, n);
//   bytes::Reader in(out, "checkpoint");
//   KVINDEX_RETURN_IF_ERROR(in.Varint(&n, "count"));
//
// Thread safety: pure functions; a Reader is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shared/base/status.h"
#include "shared/base/strings.h"

namespace kvindex::bytes {

inline void PutVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

inline void PutFixed64(std::string* out, uint64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  out->append(bytes, 8);
}

inline void PutString(std::string* out, std::string_view text) {
  PutVarint(out, text.size());
  out->append(text);
}

class Reader {
 public:
  // `record` names what is read in error messages ("checkpoint", ...).
  Reader(std::string_view in, std::string_view record) : in_(in), record_(record) {}
  bool done() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }

  Status Varint(uint64_t* value, const char* what) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return Error(what);
      const uint8_t byte = static_cast<uint8_t>(in_[pos_++]);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return absl::OkStatus();
    }
    return Error(what);
  }
  Status Varint32(uint32_t* value, const char* what) {
    uint64_t wide = 0;
    KVINDEX_RETURN_IF_ERROR(Varint(&wide, what));
    if (wide > UINT32_MAX) return Error(what);
    *value = static_cast<uint32_t>(wide);
    return absl::OkStatus();
  }
  Status Fixed64(uint64_t* value, const char* what) {
    if (remaining() < 8) return Error(what);
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in_[pos_ + i]);
    pos_ += 8;
    *value = v;
    return absl::OkStatus();
  }
  Status Byte(uint8_t* value, const char* what) {
    if (pos_ >= in_.size()) return Error(what);
    *value = static_cast<uint8_t>(in_[pos_++]);
    return absl::OkStatus();
  }
  Status String(std::string* value, const char* what) {
    uint64_t size = 0;
    KVINDEX_RETURN_IF_ERROR(Varint(&size, what));
    if (size > remaining()) return Error(what);
    value->assign(in_.substr(pos_, size));
    pos_ += size;
    return absl::OkStatus();
  }
  // Count of items that take at least `min_bytes` each: bounded by what is left.
  Status Count(uint64_t* value, size_t min_bytes, const char* what) {
    KVINDEX_RETURN_IF_ERROR(Varint(value, what));
    if (*value > remaining() / min_bytes) return Error(what);
    return absl::OkStatus();
  }
  std::string_view Take(size_t n) {
    std::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  Status Error(const char* what) const {
    return absl::DataLossError(
        strings::Cat(record_, ": truncated or garbled ", what, " at byte ", pos_));
  }
  std::string_view in_;
  std::string_view record_;
  size_t pos_ = 0;
};

}  // namespace kvindex::bytes
