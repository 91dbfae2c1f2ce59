#include "shared/query/compat_hashes.h"

#include <charconv>

namespace kvindex::query::compat {

Status CheckMooncakeSeed(uint64_t seed) {
  if (seed == kMooncakeSeed) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "hash seed " + std::to_string(seed) + " is not supported: kvindex indexes the RFC #1403 " +
      "rolling XXH3-64 hashes with seed " + std::to_string(kMooncakeSeed) +
      " (Dynamo's); send 'token_ids' to /query instead");
}

StatusOr<uint64_t> ParseSglangHash(std::string_view text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (text.empty()) return absl::InvalidArgumentError("empty hash");
  int64_t signed_value = 0;
  if (auto [p, ec] = std::from_chars(begin, end, signed_value); ec == std::errc() && p == end) {
    return static_cast<uint64_t>(signed_value);
  }
  uint64_t unsigned_value = 0;
  if (auto [p, ec] = std::from_chars(begin, end, unsigned_value); ec == std::errc() && p == end) {
    return unsigned_value;
  }
  return absl::InvalidArgumentError("hash '" + std::string(text.substr(0, 64)) +
                                    "' is not a decimal 64-bit integer");
}

std::string SglangHashString(uint64_t value) { return std::to_string(static_cast<int64_t>(value)); }

}  // namespace kvindex::query::compat
