// Small std::string_view helpers for shared/http. Debian's Abseil is built
// with its own absl::string_view (not std::string_view), so absl::StrCat and
// friends do not accept std::string_view; these do.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvindex::http::internal {

inline void AppendOne(std::string* out, std::string_view text) { out->append(text); }
inline void AppendOne(std::string* out, const char* text) { out->append(text); }
inline void AppendOne(std::string* out, const std::string& text) { out->append(text); }
inline void AppendOne(std::string* out, char c) { out->push_back(c); }
template <typename T>
requires std::is_integral_v<T>
inline void AppendOne(std::string* out, T value) {
  char buffer[24];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

template <typename... Args>
void Append(std::string* out, const Args&... args) {
  (AppendOne(out, args), ...);
}

template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  Append(&out, args...);
  return out;
}

inline char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

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

inline std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r' ||
                           text.front() == '\n')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r' ||
                           text.back() == '\n')) {
    text.remove_suffix(1);
  }
  return text;
}

template <typename T>
bool ParseUnsigned(std::string_view text, T* out, int base = 10) {
  if (text.empty()) return false;
  auto result = std::from_chars(text.data(), text.data() + text.size(), *out, base);
  return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

inline std::string ToLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = Lower(c);
  return out;
}

}  // namespace kvindex::http::internal
