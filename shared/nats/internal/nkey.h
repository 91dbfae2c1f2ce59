// NATS NKeys: the user public key that belongs to an NKey seed.
//
// cnats signs the server's nonce from a seed file (natsOptions_SetNKeyFromSeed)
// but wants the public key spelled out too; operators only hand us the seed
// file, so the public key is derived here (Ed25519 via OpenSSL).
//
//   KVINDEX_ASSIGN_OR_RETURN(std::string public_key, internal::PublicKeyFromSeedFile(path));
//   // public_key == "U..." (56 characters)
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/base/status.h"

namespace kvindex::nats::internal {

// The public key ("U...", "A...", ...) of a seed ("SU...", "SA...").
// InvalidArgument when the text is not a well-formed seed (bad base32, bad
// checksum, wrong length). Never puts the seed into the error text.
StatusOr<std::string> PublicKeyFromSeed(std::string_view seed);

// Reads the first seed-looking word (starts with 'S', 58 characters) of a file,
// e.g. one written by `nk -gen user` or a .nk file, and derives its public key.
StatusOr<std::string> PublicKeyFromSeedFile(const std::string& path);

// Spells a raw 32-byte Ed25519 seed as a user seed ("SU..."); for tests.
std::string EncodeUserSeed(const std::array<uint8_t, 32>& raw);
// The same for role 'O' (operator, "SO..."), 'A' (account) or 'U' (user);
// for tests (operator-mode JWTs, testing/jwt.h).
std::string EncodeSeed(char role, const std::array<uint8_t, 32>& raw);

}  // namespace kvindex::nats::internal
