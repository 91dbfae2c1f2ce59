#include "shared/wire/msgpack_writer.h"

#include <bit>
#include <cstring>

namespace kvindex::wire {

void MsgpackWriter::Be(uint64_t value, int bytes) {
  for (int k = bytes - 1; k >= 0; --k) out_->push_back(static_cast<uint8_t>(value >> (8 * k)));
}

void MsgpackWriter::Uint(uint64_t value) {
  if (value <= 0x7f) {
    out_->push_back(static_cast<uint8_t>(value));
  } else if (value <= 0xff) {
    out_->push_back(0xcc);
    Be(value, 1);
  } else if (value <= 0xffff) {
    out_->push_back(0xcd);
    Be(value, 2);
  } else if (value <= 0xffffffffu) {
    out_->push_back(0xce);
    Be(value, 4);
  } else {
    Uint64Fixed(value);
  }
}

void MsgpackWriter::Int(int64_t value) {
  if (value >= 0) {
    Uint(static_cast<uint64_t>(value));
  } else if (value >= -32) {
    out_->push_back(static_cast<uint8_t>(value));
  } else if (value >= INT8_MIN) {
    out_->push_back(0xd0);
    Be(static_cast<uint64_t>(value), 1);
  } else if (value >= INT16_MIN) {
    out_->push_back(0xd1);
    Be(static_cast<uint64_t>(value), 2);
  } else if (value >= INT32_MIN) {
    out_->push_back(0xd2);
    Be(static_cast<uint64_t>(value), 4);
  } else {
    Int64Fixed(value);
  }
}

void MsgpackWriter::Uint64Fixed(uint64_t value) {
  out_->push_back(0xcf);
  Be(value, 8);
}

void MsgpackWriter::Int64Fixed(int64_t value) {
  out_->push_back(0xd3);
  Be(static_cast<uint64_t>(value), 8);
}

void MsgpackWriter::Float64(double value) {
  out_->push_back(0xcb);
  Be(std::bit_cast<uint64_t>(value), 8);
}

void MsgpackWriter::Str(std::string_view value) {
  const size_t n = value.size();
  if (n <= 31) {
    out_->push_back(static_cast<uint8_t>(0xa0 | n));
  } else if (n <= 0xff) {
    out_->push_back(0xd9);
    Be(n, 1);
  } else if (n <= 0xffff) {
    out_->push_back(0xda);
    Be(n, 2);
  } else {
    out_->push_back(0xdb);
    Be(n, 4);
  }
  out_->insert(out_->end(), value.begin(), value.end());
}

void MsgpackWriter::Bin(std::span<const uint8_t> value) {
  const size_t n = value.size();
  if (n <= 0xff) {
    out_->push_back(0xc4);
    Be(n, 1);
  } else if (n <= 0xffff) {
    out_->push_back(0xc5);
    Be(n, 2);
  } else {
    out_->push_back(0xc6);
    Be(n, 4);
  }
  out_->insert(out_->end(), value.begin(), value.end());
}

void MsgpackWriter::ArrayHeader(uint32_t count) {
  if (count <= 15) {
    out_->push_back(static_cast<uint8_t>(0x90 | count));
  } else if (count <= 0xffff) {
    out_->push_back(0xdc);
    Be(count, 2);
  } else {
    out_->push_back(0xdd);
    Be(count, 4);
  }
}

void MsgpackWriter::MapHeader(uint32_t count) {
  if (count <= 15) {
    out_->push_back(static_cast<uint8_t>(0x80 | count));
  } else if (count <= 0xffff) {
    Map16Header(static_cast<uint16_t>(count));
  } else {
    out_->push_back(0xdf);
    Be(count, 4);
  }
}

void MsgpackWriter::Map16Header(uint16_t count) {
  out_->push_back(0xde);
  Be(count, 2);
}

}  // namespace kvindex::wire
