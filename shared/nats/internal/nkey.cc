#include "shared/nats/internal/nkey.h"
#include "shared/base/strings.h"

#include <openssl/evp.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace kvindex::nats::internal {
namespace {

constexpr char kBase32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
constexpr uint8_t kPrefixSeed = 18 << 3;      // 'S'
constexpr uint8_t kPrefixUser = 20 << 3;      // 'U'
constexpr uint8_t kPrefixOperator = 14 << 3;  // 'O'
constexpr uint8_t kPrefixAccount = 0;         // 'A'
constexpr size_t kSeedChars = 58;             // base32 of 2 + 32 + 2 bytes

// CRC-16/XMODEM, the checksum NKeys append (little endian).
uint16_t Crc16(const uint8_t* data, size_t size) {
  uint16_t crc = 0;
  for (size_t i = 0; i < size; ++i) {
    crc ^= static_cast<uint16_t>(data[i]) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::string Base32Encode(const std::vector<uint8_t>& bytes) {
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (uint8_t b : bytes) {
    buffer = (buffer << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out.push_back(kBase32[(buffer >> (bits - 5)) & 31]);
      bits -= 5;
    }
  }
  if (bits > 0) out.push_back(kBase32[(buffer << (5 - bits)) & 31]);
  return out;
}

bool Base32Decode(std::string_view text, std::vector<uint8_t>* out) {
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= '2' && c <= '7') {
      value = c - '2' + 26;
    } else {
      return false;
    }
    buffer = (buffer << 5) | static_cast<uint32_t>(value);
    bits += 5;
    if (bits >= 8) {
      out->push_back(static_cast<uint8_t>(buffer >> (bits - 8)));
      bits -= 8;
    }
  }
  return true;
}

void AppendCrc(std::vector<uint8_t>* bytes) {
  const uint16_t crc = Crc16(bytes->data(), bytes->size());
  bytes->push_back(static_cast<uint8_t>(crc & 0xFF));
  bytes->push_back(static_cast<uint8_t>(crc >> 8));
}

}  // namespace

StatusOr<std::string> PublicKeyFromSeed(std::string_view seed) {
  std::vector<uint8_t> raw;
  if (seed.size() != kSeedChars || !Base32Decode(seed, &raw) || raw.size() != 36) {
    return absl::InvalidArgumentError("not an NKey seed (bad length or base32)");
  }
  const uint16_t crc = Crc16(raw.data(), 34);
  if (raw[34] != (crc & 0xFF) || raw[35] != (crc >> 8)) {
    return absl::InvalidArgumentError("NKey seed checksum mismatch");
  }
  if ((raw[0] & 0xF8) != kPrefixSeed) return absl::InvalidArgumentError("not an NKey seed");
  const auto public_prefix = static_cast<uint8_t>(((raw[0] & 7) << 5) | (raw[1] >> 3));

  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, raw.data() + 2, 32);
  std::fill(raw.begin(), raw.end(), 0);  // the seed is a secret; do not leave it around
  if (key == nullptr) return absl::InternalError("Ed25519 key from NKey seed failed");
  std::vector<uint8_t> public_bytes(33);
  size_t length = 32;
  const int ok = EVP_PKEY_get_raw_public_key(key, public_bytes.data() + 1, &length);
  EVP_PKEY_free(key);
  if (ok != 1 || length != 32) return absl::InternalError("Ed25519 public key failed");
  public_bytes[0] = public_prefix;
  AppendCrc(&public_bytes);
  return Base32Encode(public_bytes);
}

StatusOr<std::string> PublicKeyFromSeedFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::InvalidArgumentError(strings::Cat("cannot read NKey seed file ", path));
  std::string word;
  while (file >> word) {
    if (word.size() == kSeedChars && word[0] == 'S') {
      StatusOr<std::string> public_key = PublicKeyFromSeed(word);
      std::fill(word.begin(), word.end(), '\0');
      if (!public_key.ok()) {
        return Status(public_key.status().code(),
                      strings::Cat(path, ": ", public_key.status().message()));
      }
      return public_key;
    }
  }
  return absl::InvalidArgumentError(strings::Cat("no NKey seed in ", path));
}

std::string EncodeUserSeed(const std::array<uint8_t, 32>& raw) { return EncodeSeed('U', raw); }

std::string EncodeSeed(char role, const std::array<uint8_t, 32>& raw) {
  const uint8_t prefix = role == 'O' ? kPrefixOperator : role == 'A' ? kPrefixAccount : kPrefixUser;
  std::vector<uint8_t> bytes;
  bytes.push_back(static_cast<uint8_t>(kPrefixSeed | (prefix >> 5)));
  bytes.push_back(static_cast<uint8_t>((prefix & 31) << 3));
  bytes.insert(bytes.end(), raw.begin(), raw.end());
  AppendCrc(&bytes);
  return Base32Encode(bytes);
}

}  // namespace kvindex::nats::internal
