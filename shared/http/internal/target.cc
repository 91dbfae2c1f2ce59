#include "shared/http/internal/target.h"

#include <strings.h>

namespace kvindex::http::internal {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() &&
         strncasecmp(text.data(), prefix.data(), prefix.size()) == 0;
}

}  // namespace

bool ParseTarget(std::string_view raw, Target* target, std::string* error) {
  for (char c : raw) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) {
      *error = "request target holds a byte outside visible ASCII";
      return false;
    }
  }
  std::string_view rest = raw;
  if (StartsWithNoCase(rest, "http://") || StartsWithNoCase(rest, "https://")) {
    rest.remove_prefix(rest.find("//") + 2);
    const size_t slash = rest.find_first_of("/?");
    rest = slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash);
    if (rest.front() == '?') {
      *error = "absolute-form request target without a path";
      return false;
    }
  }
  if (rest.empty() || rest.front() != '/') {
    *error = "request target must be origin-form (/path) or absolute-form (http://host/path)";
    return false;
  }
  const size_t question = rest.find('?');
  std::string_view path = rest.substr(0, question);
  target->query =
      question == std::string_view::npos ? std::string_view() : rest.substr(question + 1);
  target->path.clear();
  target->path.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      target->path.push_back(path[i]);
      continue;
    }
    const int high = i + 2 < path.size() ? HexValue(path[i + 1]) : -1;
    const int low = high >= 0 ? HexValue(path[i + 2]) : -1;
    if (low < 0) {
      *error = "malformed percent escape in request target";
      return false;
    }
    const int byte = high * 16 + low;
    if (byte < 0x20 || byte == 0x7f) {
      *error = "request target path encodes a NUL or control byte";
      return false;
    }
    if (byte == '/') {
      // Decoded, "/a%2Fb" would name "/a/b": a route (or a proxy's rule)
      // the client did not write. Refused rather than guessed.
      *error = "request target path encodes '/' (%2F)";
      return false;
    }
    target->path.push_back(static_cast<char>(byte));
    i += 2;
  }
  return true;
}

}  // namespace kvindex::http::internal
