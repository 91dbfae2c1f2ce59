#include "shared/nats/subjects.h"

#include <openssl/sha.h>

#include "shared/base/strings.h"

namespace kvindex::nats {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

bool IsKept(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

// Uppercase hex only: one spelling per byte keeps encoded subjects comparable.
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string EncodeToken(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsKept(c)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

StatusOr<std::string> DecodeToken(std::string_view token) {
  if (token.empty()) return absl::InvalidArgumentError("empty subject token");
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size(); ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    if (IsKept(c)) {
      out.push_back(token[i]);
      continue;
    }
    if (c != '%') {
      return absl::InvalidArgumentError(
          strings::Cat("subject token has a byte that is never encoded at offset ", i));
    }
    if (i + 2 >= token.size()) {
      return absl::InvalidArgumentError(
          strings::Cat("subject token ends inside an escape at offset ", i));
    }
    const int hi = HexValue(token[i + 1]);
    const int lo = HexValue(token[i + 2]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          strings::Cat("subject token has a bad escape at offset ", i));
    }
    const auto byte = static_cast<unsigned char>(hi * 16 + lo);
    if (IsKept(byte)) {
      return absl::InvalidArgumentError(
          strings::Cat("subject token escapes a plain byte at offset ", i));
    }
    out.push_back(static_cast<char>(byte));
    i += 2;
  }
  return out;
}

std::string ModelToken(std::string_view model) {
  std::string token = EncodeToken(model);
  if (token.size() <= kMaxModelTokenBytes) return token;
  constexpr size_t kHead = 96;
  size_t head = kHead;
  // Never cut an escape: back up to before a '%' in the last two bytes.
  for (size_t back = 1; back <= 2; ++back) {
    if (token[kHead - back] == '%') head = kHead - back;
  }
  token.resize(head);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(model.data()), model.size(), digest);
  token.push_back('~');
  for (int i = 0; i < 16; ++i) {
    token.push_back(kHex[digest[i] >> 4]);
    token.push_back(kHex[digest[i] & 0xF]);
  }
  return token;
}

bool IsModelToken(std::string_view token) {
  const size_t tilde = token.find('~');
  if (tilde == std::string_view::npos) {
    return token.size() <= kMaxModelTokenBytes && DecodeToken(token).ok();
  }
  const std::string_view digest = token.substr(tilde + 1);
  if (tilde == 0 || tilde > 96 || digest.size() != 32 ||
      !DecodeToken(token.substr(0, tilde)).ok()) {
    return false;
  }
  for (char c : digest) {
    if (HexValue(c) < 0) return false;
  }
  return true;
}

Status ValidateSubjectNames(std::string_view prefix, std::string_view node) {
  KVINDEX_RETURN_IF_ERROR(ValidatePrefix(prefix));
  if (prefix.size() > kMaxPrefixBytes) {
    return absl::InvalidArgumentError(
        strings::Cat("--stream-prefix: ", prefix.size(), " bytes; at most ", kMaxPrefixBytes));
  }
  if (node.empty()) return absl::InvalidArgumentError("--node: empty node id");
  const size_t token = EncodeToken(node).size();
  if (token > kMaxNodeTokenBytes) {
    return absl::InvalidArgumentError(
        strings::Cat("--node: the node id encodes to a ", token, "-byte subject token; at most ",
                     kMaxNodeTokenBytes, " (bytes outside [A-Za-z0-9-] take three)"));
  }
  return absl::OkStatus();
}

Status ValidatePrefix(std::string_view prefix) {
  if (prefix.empty()) return absl::InvalidArgumentError("--stream-prefix: empty subject prefix");
  bool token_empty = true;
  for (char c : prefix) {
    if (c == '.') {
      if (token_empty) break;
      token_empty = true;
      continue;
    }
    if (!IsKept(static_cast<unsigned char>(c)) && c != '_') {
      return absl::InvalidArgumentError(strings::Cat(
          "--stream-prefix: '", prefix, "' may hold only [A-Za-z0-9_-] tokens separated by dots"));
    }
    token_empty = false;
  }
  if (token_empty) {
    return absl::InvalidArgumentError(
        strings::Cat("--stream-prefix: '", prefix, "' has an empty token"));
  }
  return absl::OkStatus();
}

std::string SubjectScheme::StreamSubjects() const { return strings::Cat(prefix, ".>"); }

std::string SubjectScheme::Events(std::string_view model, std::string_view node) const {
  return strings::Cat(prefix, ".", ModelToken(model), ".", EncodeToken(node));
}

std::string SubjectScheme::Agent(std::string_view node) const {
  return strings::Cat(prefix, "._agent.", EncodeToken(node));
}

std::string SubjectScheme::Expire(std::string_view node) const {
  return strings::Cat(prefix, "._expire.", EncodeToken(node));
}

std::string SubjectScheme::All() const { return StreamSubjects(); }

}  // namespace kvindex::nats
