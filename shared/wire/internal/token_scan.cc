#include "shared/wire/internal/token_scan.h"

#include <array>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvindex::wire::internal {

namespace {

struct TokenCode {
  uint8_t length;  // 0: not a fast-path encoding
  uint8_t shift;
  uint32_t mask;
};

constexpr std::array<TokenCode, 256> MakeTokenCodes() {
  std::array<TokenCode, 256> codes{};
  for (int b = 0; b < 0x80; ++b) codes[b] = {1, 56, 0xffu};
  codes[0xcc] = {2, 48, 0xffu};
  codes[0xcd] = {3, 40, 0xffffu};
  codes[0xce] = {5, 24, 0xffffffffu};
  return codes;
}

constexpr std::array<TokenCode, 256> kTokenCodes = MakeTokenCodes();

// How far ahead of the cursor payload bytes are prefetched.
constexpr size_t kPrefetchBytes = 1024;

// Scalar tokens decoded after the group path stops, before it is retried.
// Doubled up to kMaxScalarBurst while the group path makes no progress.
constexpr uint32_t kScalarBurst = 8;
constexpr uint32_t kMaxScalarBurst = 128;

#if defined(__SSE2__)

// Three consecutive cd/ce tokens starting at offset 0, given the ce bits of
// offsets 0..10 (index bit i: the byte at offset i is 0xce).
struct TokenGroup {
  uint16_t starts;  // bit i: a token starts at offset i (three bits)
  uint8_t advance;  // bytes of the three tokens (9..15)
  uint8_t second;   // start offset of the second token (3 or 5)
  uint8_t third;    // start offset of the third token (6..10)
  uint8_t ce;       // bit t: token t is ce (uint32), else cd (uint16)
  uint8_t unused[2];
};

constexpr int kGroupBits = 11;
constexpr uint64_t kGroupIndexMask = (uint64_t{1} << kGroupBits) - 1;
constexpr int kGroupWindow = 64;  // bytes scanned per pass (4 x 16)
constexpr int kGroupsPerWindow = 4;

constexpr std::array<TokenGroup, 1 << kGroupBits> MakeTokenGroups() {
  std::array<TokenGroup, 1 << kGroupBits> groups{};
  for (uint32_t index = 0; index < groups.size(); ++index) {
    uint32_t starts[3] = {};
    uint32_t mask = 0, ce = 0;
    uint32_t at = 0;
    for (uint32_t t = 0; t < 3; ++t) {
      starts[t] = at;
      mask |= 1u << at;
      const uint32_t is_ce = (index >> at) & 1;
      ce |= is_ce << t;
      at += is_ce ? 5 : 3;
    }
    groups[index] = {static_cast<uint16_t>(mask),     static_cast<uint8_t>(at),
                     static_cast<uint8_t>(starts[1]), static_cast<uint8_t>(starts[2]),
                     static_cast<uint8_t>(ce),        {0, 0}};
  }
  return groups;
}

constexpr std::array<TokenGroup, 1 << kGroupBits> kTokenGroups = MakeTokenGroups();
// The last group of a window starts at most at 3 * 15 = 45 and reads ce bits
// up to 45 + 10, and bytes up to 45 + 10 + 4 (a ce value).
static_assert((kGroupsPerWindow - 1) * 15 + kGroupBits <= kGroupWindow);
static_assert((kGroupsPerWindow - 1) * 15 + 10 + 5 <= kGroupWindow);

// 20 cd tokens back to back: type bytes at 0, 3, ..., 57; the last value
// load reads bytes 58..61.
constexpr uint32_t kCdRunTokens = 20;
constexpr uint64_t MakeCdRun() {
  uint64_t bits = 0;
  for (uint32_t t = 0; t < kCdRunTokens; ++t) bits |= uint64_t{1} << (3 * t);
  return bits;
}
constexpr uint64_t kCdRun = MakeCdRun();
static_assert(3 * (kCdRunTokens - 1) + 1 + 4 <= kGroupWindow);

inline uint32_t LoadBe32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, sizeof(x));
  return __builtin_bswap32(x);
}

// Decodes groups of three cd/ce tokens while at least 3 tokens and 64 buffer
// bytes remain. Advances *pos and returns the new token count.
uint32_t GroupTokens(const uint8_t** pos, const uint8_t* end, uint32_t* out, uint32_t k,
                     uint32_t n) {
  const uint8_t* p = *pos;
  const __m128i cd_byte = _mm_set1_epi8(static_cast<char>(0xcd));
  const __m128i ce_byte = _mm_set1_epi8(static_cast<char>(0xce));
  bool ok = true;
  while (ok && n - k >= 3 && end - p >= kGroupWindow) {
    if (static_cast<size_t>(end - p) > kPrefetchBytes) __builtin_prefetch(p + kPrefetchBytes);
    uint64_t ce = 0, any = 0;
    for (int i = 0; i < kGroupWindow / 16; ++i) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
      const uint64_t is_cd = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, cd_byte)));
      const uint64_t is_ce = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, ce_byte)));
      ce |= is_ce << (16 * i);
      any |= (is_cd | is_ce) << (16 * i);
    }
    // A window of 20 cd tokens (a vocabulary below 65,536 ids, e.g. 32k):
    // every start is known, no chain at all.
    if ((any & ~ce & kCdRun) == kCdRun && n - k >= kCdRunTokens) {
      for (uint32_t t = 0; t < kCdRunTokens; ++t) out[k + t] = LoadBe32(p + 3 * t + 1) >> 16;
      k += kCdRunTokens;
      p += 3 * kCdRunTokens;
      continue;
    }
    uint32_t base = 0;
    for (int g = 0; g < kGroupsPerWindow && n - k >= 3; ++g) {
      const TokenGroup& group = kTokenGroups[(ce >> base) & kGroupIndexMask];
      if ((~(any >> base) & group.starts) != 0) {
        ok = false;  // a start that is neither cd nor ce: scalar path
        break;
      }
      // cd: the 16-bit value is the top half of the 4 bytes after the type.
      const uint8_t* q = p + base + 1;
      const uint32_t v0 = LoadBe32(q);
      const uint32_t v1 = LoadBe32(q + group.second);
      const uint32_t v2 = LoadBe32(q + group.third);
      out[k] = (group.ce & 1) ? v0 : v0 >> 16;
      out[k + 1] = (group.ce & 2) ? v1 : v1 >> 16;
      out[k + 2] = (group.ce & 4) ? v2 : v2 >> 16;
      k += 3;
      base += group.advance;
    }
    p += base;
  }
  *pos = p;
  return k;
}

#endif  // __SSE2__

}  // namespace

uint32_t ScanTokens(const uint8_t** pos, const uint8_t* end, uint32_t* out, uint32_t n) {
  const uint8_t* p = *pos;
  uint32_t k = 0;
  uint32_t burst = kScalarBurst;
  for (;;) {
#if defined(__SSE2__)
    const uint32_t before_groups = k;
    k = GroupTokens(&p, end, out, k, n);
    // Arrays with many small ids (fixint, cc) rarely have three cd/ce in a
    // row: back off so that failed attempts stay a small part of the cost.
    burst = k == before_groups ? (burst < kMaxScalarBurst ? 2 * burst : burst) : kScalarBurst;
#endif
    const uint32_t limit = n - k > burst ? k + burst : n;
    const uint32_t before = k;
    while (k < limit && end - p >= 8) {
      const TokenCode code = kTokenCodes[p[0]];
      if (code.length == 0) break;
      uint64_t x;
      std::memcpy(&x, p, sizeof(x));
      x = __builtin_bswap64(x);
      out[k++] = static_cast<uint32_t>((x >> code.shift) & code.mask);
      p += code.length;
    }
    if (k == n || k == before) break;  // done, or no fast-path token here
  }
  *pos = p;
  return k;
}

}  // namespace kvindex::wire::internal
