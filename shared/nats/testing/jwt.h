// Test-only: NATS decentralized authentication (operator mode) without nsc
// or nk, written from the documented formats: NKeys (Ed25519 keys spelled in
// base32 with a role prefix and a CRC-16), JWTs whose header is
// {"typ":"JWT","alg":"ed25519-nkey"} and whose signature is the Ed25519
// signature (by the issuer's NKey) of "base64url(header).base64url(claims)",
// the operator's JWT self-signed, an account's signed by the operator, a
// user's by its account; a .creds file holds a user's JWT and seed between
// the BEGIN/END markers nsc writes. A nats-server runs them with
// `operator: <JWT>`, `resolver: MEMORY` and `resolver_preload`.
//
//   Identity op = Identity::New('O'), system = Identity::New('A'),
//            account = Identity::New('A'), user = Identity::New('U');
//   std::string config = OperatorModeConfig(op, system, account, {});
//   WriteFile(dir, "user.creds", CredsFile(account, user));
//
// Thread safety: pure functions (Identity::New draws from OpenSSL's RNG).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kvindex::nats::testing {

struct Identity {
  std::array<uint8_t, 32> raw{};  // the Ed25519 seed
  std::string seed;               // "SO...", "SA...", "SU..."
  std::string public_key;         // "O...", "A...", "U..."

  // role: 'O' operator, 'A' account, 'U' user.
  static Identity New(char role);
};

// Signed JWTs (iat = now). An account's JWT revokes the users in `revoked`
// (all their JWTs issued up to now).
std::string OperatorJwt(const Identity& op);
std::string AccountJwt(const Identity& op, const Identity& account,
                       const std::vector<std::string>& revoked);
std::string UserJwt(const Identity& account, const Identity& user);

// A .creds file for `user` of `account`, as nsc writes it.
std::string CredsFile(const Identity& account, const Identity& user);

// nats-server configuration: operator mode, `system` (the system account
// JetStream needs) and `account` preloaded in a memory resolver, the users
// in `revoked` revoked by `account`.
std::string OperatorModeConfig(const Identity& op, const Identity& system, const Identity& account,
                               const std::vector<std::string>& revoked);

}  // namespace kvindex::nats::testing
