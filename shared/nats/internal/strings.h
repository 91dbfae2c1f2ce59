// String helpers for kvindex_nats. Debian's absl (20220623) has its own
// absl::string_view, so absl::StrCat/StrSplit reject std::string_view, and it
// predates StrContainsIgnoreCase; these small helpers fill in.
//
//   std::string text = internal::Cat("stream ", name, " replicas ", 3);
#pragma once

#include <algorithm>
#include <cctype>
#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvindex::nats::internal {

inline void Append(std::string& out, std::string_view piece) { out.append(piece); }
inline void Append(std::string& out, const std::string& piece) { out.append(piece); }
inline void Append(std::string& out, const char* piece) { out.append(piece); }
// Status::message() is an absl::string_view.
inline void Append(std::string& out, absl::string_view piece) {
  out.append(piece.data(), piece.size());
}
inline void Append(std::string& out, char piece) { out.push_back(piece); }
template <std::integral T>
requires(!std::same_as<T, char> && !std::same_as<T, bool>) void Append(std::string& out, T value) {
  out.append(std::to_string(value));
}

// Concatenates strings, views, C strings, chars and integers.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (Append(out, args), ...);
  return out;
}

// `text` without leading and trailing ASCII whitespace.
inline std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// Pieces of `text` between `sep`s, surrounding whitespace trimmed, empty ones dropped.
inline std::vector<std::string_view> SplitTrimmed(std::string_view text, char sep) {
  std::vector<std::string_view> pieces;
  while (!text.empty()) {
    const size_t pos = text.find(sep);
    const std::string_view piece = Trim(text.substr(0, pos));
    if (!piece.empty()) pieces.push_back(piece);
    if (pos == std::string_view::npos) break;
    text.remove_prefix(pos + 1);
  }
  return pieces;
}

// ASCII case-insensitive substring test.
inline bool ContainsIgnoreCase(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a)) ==
                                 std::tolower(static_cast<unsigned char>(b));
                        });
  return it != haystack.end() || needle.empty();
}

}  // namespace kvindex::nats::internal
