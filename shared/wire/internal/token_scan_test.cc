// ScanTokens against a one-token-at-a-time reference decoder: every value,
// where it stops and why, over random mixes of the four uint32 encodings
// with foreign bytes, at every buffer length (the buffer is allocated to its
// exact size, so ASan catches a read past it).
#include "shared/wire/internal/token_scan.h"
#include "shared/wire/testing/token_scan_reference.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <random>
#include <vector>

namespace kvindex::wire::internal {
namespace {

using ::kvindex::wire::testing::RefToken;

void Append(std::vector<uint8_t>* out, std::mt19937_64& rng, int mix) {
  const uint32_t v = static_cast<uint32_t>(rng());
  const int kind = mix == 0   ? 2
                   : mix == 1 ? 2 + static_cast<int>(rng() % 2)
                              : static_cast<int>(rng() % 5);
  switch (kind) {
    case 0:  // positive fixint
      out->push_back(v & 0x7f);
      break;
    case 1:  // cc
      out->insert(out->end(), {0xcc, static_cast<uint8_t>(v)});
      break;
    case 2:  // cd
      out->insert(out->end(), {0xcd, static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
      break;
    case 3:  // ce
      out->insert(out->end(), {0xce, static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16),
                               static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
      break;
    default:  // a byte no fast path takes (nil, cf, negative fixint, str...)
      out->push_back(std::array<uint8_t, 5>{0xc0, 0xcf, 0xd0, 0xff, 0xa3}[rng() % 5]);
      break;
  }
}

// Checks ScanTokens on `bytes` (copied to an exact-size heap buffer).
void Check(const std::vector<uint8_t>& bytes, uint32_t n) {
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
  std::copy(bytes.begin(), bytes.end(), buffer.get());
  const uint8_t* const begin = buffer.get();
  const uint8_t* const end = begin + bytes.size();
  std::vector<uint32_t> out(n + 1, 0xdeadbeef);
  const uint8_t* p = begin;
  const uint32_t k = ScanTokens(&p, end, out.data(), n);
  ASSERT_LE(k, n);
  ASSERT_EQ(out[n], 0xdeadbeefu) << "wrote past n";
  const uint8_t* q = begin;
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t value = 0;
    const size_t len = RefToken(q, end, &value);
    ASSERT_NE(len, 0u) << "token " << i << " is not a fast-path token";
    ASSERT_EQ(out[i], value) << "token " << i;
    q += len;
  }
  ASSERT_EQ(p, q) << "cursor not after the decoded tokens";
  // It stops only at n, at a byte no fast path takes, or short of 8 bytes.
  uint32_t value = 0;
  if (k < n && end - p >= 8) {
    EXPECT_EQ(RefToken(p, end, &value), 0u) << "stopped at a fast-path token, offset " << p - begin;
  }
}

TEST(TokenScanTest, MatchesTheReferenceOnRandomMixes) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 3000; ++round) {
    const int mix = round % 3;  // cd only, cd/ce, everything with foreign bytes
    const int tokens = static_cast<int>(rng() % 200);
    std::vector<uint8_t> bytes;
    for (int t = 0; t < tokens; ++t) Append(&bytes, rng, mix);
    const uint32_t n = static_cast<uint32_t>(rng() % (tokens + 2));
    ASSERT_NO_FATAL_FAILURE(Check(bytes, n)) << "round " << round;
    // Every cut of a short buffer: the ends of the paths' windows.
    if (round % 50 == 0) {
      for (size_t cut = 0; cut <= bytes.size() && cut < 80; ++cut) {
        ASSERT_NO_FATAL_FAILURE(
            Check(std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut), tokens))
            << "round " << round << " cut " << cut;
      }
    }
  }
}

TEST(TokenScanTest, DecodesLongUniformRunsCompletely) {
  std::mt19937_64 rng(3);
  for (int mix : {0, 1}) {
    std::vector<uint8_t> bytes;
    for (int t = 0; t < 1000; ++t) Append(&bytes, rng, mix);
    bytes.insert(bytes.end(), 8, 0xc0);  // a tail, so the last tokens have 8 bytes
    const uint8_t* p = bytes.data();
    std::vector<uint32_t> out(1000);
    EXPECT_EQ(ScanTokens(&p, bytes.data() + bytes.size(), out.data(), 1000), 1000u);
    EXPECT_EQ(bytes.data() + bytes.size() - p, 8);
    ASSERT_NO_FATAL_FAILURE(Check(bytes, 1000));
  }
}

}  // namespace
}  // namespace kvindex::wire::internal
