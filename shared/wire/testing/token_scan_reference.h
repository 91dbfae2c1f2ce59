// The one-token-at-a-time reference decoder that ScanTokens
// (shared/wire/internal/token_scan) is checked against, by its unit test and
// its fuzzer. Header-only; test code only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvindex::wire::testing {

// Bytes of the fast-path token at p (0: not one), and its value.
inline size_t RefToken(const uint8_t* p, const uint8_t* end, uint32_t* value) {
  const size_t left = static_cast<size_t>(end - p);
  if (left == 0) return 0;
  const uint8_t b = p[0];
  if (b < 0x80) return *value = b, 1;
  if (b == 0xcc && left >= 2) return *value = p[1], 2;
  if (b == 0xcd && left >= 3) return *value = (uint32_t{p[1]} << 8) | p[2], 3;
  if (b == 0xce && left >= 5) {
    *value = (uint32_t{p[1]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 8) | p[4];
    return 5;
  }
  return 0;
}

}  // namespace kvindex::wire::testing
