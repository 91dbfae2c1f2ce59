#include "shared/nats/internal/nkey.h"

#include <gtest/gtest.h>

namespace kvindex::nats::internal {
namespace {

TEST(NkeyTest, DerivesUserPublicKey) {
  std::array<uint8_t, 32> raw{};
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::string seed = EncodeUserSeed(raw);
  ASSERT_EQ(seed.size(), 58u);
  EXPECT_EQ(seed.substr(0, 2), "SU");
  auto public_key = PublicKeyFromSeed(seed);
  ASSERT_TRUE(public_key.ok()) << public_key.status();
  EXPECT_EQ(public_key->size(), 56u);
  EXPECT_EQ((*public_key)[0], 'U');
}

TEST(NkeyTest, RejectsCorruptSeedWithoutEchoingIt) {
  std::array<uint8_t, 32> raw{};
  std::string seed = EncodeUserSeed(raw);
  seed[10] = seed[10] == 'A' ? 'B' : 'A';
  auto public_key = PublicKeyFromSeed(seed);
  ASSERT_FALSE(public_key.ok());
  EXPECT_EQ(public_key.status().message().find(seed), std::string::npos);
  EXPECT_FALSE(PublicKeyFromSeed("SUshort").ok());
}

}  // namespace
}  // namespace kvindex::nats::internal
