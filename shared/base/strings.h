// String helpers, the one copy for every kvindex library. Debian's Abseil
// (20220623) is built with its own absl::string_view, so absl::StrCat and
// absl::StrSplit reject std::string_view, and it predates
// StrContainsIgnoreCase; these fill in.
//
//   std::string text = strings::Cat("stream ", name, " replicas ", 3);
//   for (std::string_view piece : strings::SplitTrimmed(list, ',')) ...
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvindex::strings {

inline void AppendOne(std::string* out, std::string_view piece) { out->append(piece); }
inline void AppendOne(std::string* out, const std::string& piece) { out->append(piece); }
inline void AppendOne(std::string* out, const char* piece) { out->append(piece); }
// Status::message() is an absl::string_view.
inline void AppendOne(std::string* out, absl::string_view piece) {
  out->append(piece.data(), piece.size());
}
inline void AppendOne(std::string* out, char piece) { out->push_back(piece); }
template <std::integral T>
requires(!std::same_as<T, char> && !std::same_as<T, bool>) void AppendOne(std::string* out,
                                                                          T value) {
  char buffer[24];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

// Appends strings, views, C strings, chars and integers to *out.
template <typename... Args>
void Append(std::string* out, const Args&... args) {
  (AppendOne(out, args), ...);
}

// Concatenates strings, views, C strings, chars and integers.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  Append(&out, args...);
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

// Pieces of `text` between `sep`s; empty pieces are kept.
inline std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(sep, start);
    if (pos == std::string_view::npos) {
      pieces.push_back(text.substr(start));
      return pieces;
    }
    pieces.push_back(text.substr(start, pos - start));
    start = pos + 1;
  }
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

inline char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

inline std::string ToLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = Lower(c);
  return out;
}

// ASCII case-insensitive comparisons.
inline bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

inline bool IStartsWith(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && IEquals(text.substr(0, prefix.size()), prefix);
}

inline bool ContainsIgnoreCase(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) { return Lower(a) == Lower(b); });
  return it != haystack.end() || needle.empty();
}

// The whole of `text` as an unsigned number in `base`.
template <typename T>
bool ParseUnsigned(std::string_view text, T* out, int base = 10) {
  if (text.empty()) return false;
  auto result = std::from_chars(text.data(), text.data() + text.size(), *out, base);
  return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

}  // namespace kvindex::strings
