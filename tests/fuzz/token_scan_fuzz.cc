// libFuzzer target for the token fast path (shared/wire/internal/token_scan):
// ScanTokens on arbitrary bytes against a one-token-at-a-time reference. The
// first two input bytes are the token count asked for, the rest the buffer
// (copied to a heap block of its exact size, so ASan sees any read past it).
// Traps when a value, the cursor or the stopping point differs.
// Build: cmake -DKVINDEX_FUZZ=ON -DKVINDEX_SANITIZE=ON with clang;
// run: build-fuzz/fuzz/token_scan_fuzz (or tests/fuzz/run_fuzzers.sh).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "shared/wire/internal/token_scan.h"
#include "shared/wire/testing/token_scan_reference.h"

using kvindex::wire::testing::RefToken;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint32_t n = (uint32_t{data[0]} << 8) | data[1];
  const size_t len = size - 2;
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[len == 0 ? 1 : len]);
  if (len != 0) std::memcpy(buffer.get(), data + 2, len);
  const uint8_t* const begin = buffer.get();
  const uint8_t* const end = begin + len;
  std::vector<uint32_t> out(n + 1, 0xdeadbeef);
  const uint8_t* p = begin;
  const uint32_t k = kvindex::wire::internal::ScanTokens(&p, end, out.data(), n);
  if (k > n || out[n] != 0xdeadbeef) __builtin_trap();
  const uint8_t* q = begin;
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t value = 0;
    const size_t step = RefToken(q, end, &value);
    if (step == 0 || out[i] != value) __builtin_trap();
    q += step;
  }
  if (p != q) __builtin_trap();
  uint32_t value = 0;
  // Stops only at n, at a byte no fast path takes, or short of 8 bytes.
  if (k < n && end - p >= 8 && RefToken(p, end, &value) != 0) __builtin_trap();
  return 0;
}
