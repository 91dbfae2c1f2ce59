#include "shared/nats/testing/jwt.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <chrono>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "shared/base/strings.h"
#include "shared/nats/internal/nkey.h"

namespace kvindex::nats::testing {
namespace {

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Base64Url(std::string_view bytes) {
  std::string out;
  absl::WebSafeBase64Escape(absl::string_view(bytes.data(), bytes.size()),
                            &out);  // unpadded, as JWTs are
  return out;
}

// Ed25519 signature of `data` by the NKey seed `raw`.
std::string Sign(const std::array<uint8_t, 32>& raw, std::string_view data) {
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, raw.data(), raw.size());
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  std::string signature(64, '\0');
  size_t length = signature.size();
  const bool ok =
      key != nullptr && ctx != nullptr &&
      EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key) == 1 &&
      EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(signature.data()), &length,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  if (!ok || length != 64) std::abort();  // test setup: OpenSSL without Ed25519
  return signature;
}

// A JWT of `issuer` about `subject` whose "nats" claim is `nats` (JSON).
std::string Jwt(const Identity& issuer, const std::string& subject, const std::string& name,
                const std::string& nats) {
  const std::string body =
      strings::Cat(R"("iat":)", NowSeconds(), R"(,"iss":")", issuer.public_key, R"(","name":")",
                   name, R"(","sub":")", subject, R"(","nats":)", nats);
  // jti: a digest of the other claims, as the reference library computes it.
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(body.data()), body.size(), digest);
  const std::string jti = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
  const std::string claims = strings::Cat(R"({"jti":")", jti, R"(",)", body, "}");
  const std::string signing_input =
      strings::Cat(Base64Url(R"({"typ":"JWT","alg":"ed25519-nkey"})"), ".", Base64Url(claims));
  return strings::Cat(signing_input, ".", Base64Url(Sign(issuer.raw, signing_input)));
}

}  // namespace

Identity Identity::New(char role) {
  Identity id;
  if (RAND_bytes(id.raw.data(), static_cast<int>(id.raw.size())) != 1) std::abort();
  id.seed = internal::EncodeSeed(role, id.raw);
  auto public_key = internal::PublicKeyFromSeed(id.seed);
  if (!public_key.ok()) std::abort();
  id.public_key = *public_key;
  return id;
}

std::string OperatorJwt(const Identity& op) {
  return Jwt(op, op.public_key, "kvindex-test-operator", R"({"type":"operator","version":2})");
}

std::string AccountJwt(const Identity& op, const Identity& account,
                       const std::vector<std::string>& revoked) {
  std::string revocations;
  for (const std::string& user : revoked) {
    strings::Append(&revocations, revocations.empty() ? "" : ",", "\"", user, "\":", NowSeconds());
  }
  return Jwt(op, account.public_key, "kvindex-test-account",
             strings::Cat(R"({"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,)",
                          R"("exports":-1,"wildcards":true,"conn":-1,"leaf":-1},)",
                          R"("revocations":{)", revocations, R"(},"type":"account","version":2})"));
}

std::string UserJwt(const Identity& account, const Identity& user) {
  return Jwt(account, user.public_key, "kvindex-test-user",
             R"({"pub":{},"sub":{},"subs":-1,"data":-1,"payload":-1,"type":"user","version":2})");
}

std::string CredsFile(const Identity& account, const Identity& user) {
  return strings::Cat("-----BEGIN NATS USER JWT-----\n", UserJwt(account, user),
                      "\n------END NATS USER JWT------\n\n"
                      "************************* IMPORTANT *************************\n"
                      "NKEY Seed printed below can be used to sign and prove identity.\n\n"
                      "-----BEGIN USER NKEY SEED-----\n",
                      user.seed, "\n------END USER NKEY SEED------\n");
}

std::string OperatorModeConfig(const Identity& op, const Identity& system, const Identity& account,
                               const std::vector<std::string>& revoked) {
  return strings::Cat("operator: \"", OperatorJwt(op), "\"\nsystem_account: ", system.public_key,
                      "\nresolver: MEMORY\nresolver_preload: {\n  ", system.public_key, ": \"",
                      AccountJwt(op, system, {}), "\"\n  ", account.public_key, ": \"",
                      AccountJwt(op, account, revoked), "\"\n}\n");
}

}  // namespace kvindex::nats::testing
