// MsgpackWriter: a minimal msgpack encoder appending to a byte vector.
//
// For building engine-shaped payloads in tests, benchmarks, fuzz seeds and
// simulators (event_encoder.h builds whole batches on top of it). Integers
// use the smallest encoding unless a *Fixed variant asks for a specific one
// (SGLang's `d3` int64 hashes, vLLM's `cf` uint64); Map16Header writes a
// map16 header even for few entries (msgspec does that).
//
//   std::vector<uint8_t> bytes;
//   MsgpackWriter w(&bytes);
//   w.ArrayHeader(2); w.Str("x"); w.Uint(7);
//
// Not on any hot path of the agent: the agent only decodes.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvindex::wire {

class MsgpackWriter {
 public:
  explicit MsgpackWriter(std::vector<uint8_t>* out) : out_(out) {}

  void Nil() { out_->push_back(0xc0); }
  void Bool(bool value) { out_->push_back(value ? 0xc3 : 0xc2); }
  void Uint(uint64_t value);
  void Int(int64_t value);
  void Uint64Fixed(uint64_t value);  // always cf + 8 bytes
  void Int64Fixed(int64_t value);    // always d3 + 8 bytes
  void Float64(double value);
  void Str(std::string_view value);
  void Bin(std::span<const uint8_t> value);
  void ArrayHeader(uint32_t count);
  void MapHeader(uint32_t count);
  void Map16Header(uint16_t count);  // always de + 2 bytes
  void Raw(std::span<const uint8_t> bytes) {
    out_->insert(out_->end(), bytes.begin(), bytes.end());
  }

 private:
  void Be(uint64_t value, int bytes);

  std::vector<uint8_t>* out_;
};

}  // namespace kvindex::wire
