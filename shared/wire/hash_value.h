// Engine block hashes -> one uint64 bit pattern (docs/wire-format.md section 4).
//
// Engines put block hashes on the wire as msgpack uint64 (vLLM default),
// signed int64 (SGLang, often negative), or 32-byte bin / str (vLLM with
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0). kvindex keys its per-source maps by
// one uint64 per hash:
//   uint          -> the value
//   negative int  -> its two's complement bit pattern
//   bin / str     -> the LAST 8 bytes read big-endian (shorter payloads are
//                    read whole, zero-extended on the left; empty -> 0)
// Engine hashes are worker-local identities: never compare them across
// workers (use canonical hashes, shared/hashing).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvindex::wire {

inline uint64_t HashFromSigned(int64_t value) { return static_cast<uint64_t>(value); }

inline uint64_t HashFromBytes(const uint8_t* data, size_t size) {
  const size_t start = size > 8 ? size - 8 : 0;
  uint64_t value = 0;
  for (size_t k = start; k < size; ++k) value = (value << 8) | data[k];
  return value;
}

}  // namespace kvindex::wire
