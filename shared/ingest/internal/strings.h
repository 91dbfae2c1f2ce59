// String helpers for kvindex_ingest. Debian's absl (20220623) is built with
// its own absl::string_view, so absl::StrCat/StrSplit do not accept
// std::string_view; these small helpers do.
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <vector>

namespace kvindex::ingest::internal {

inline void AppendPiece(std::string& out, std::string_view piece) { out.append(piece); }
inline void AppendPiece(std::string& out, const char* piece) { out.append(piece); }
inline void AppendPiece(std::string& out, const std::string& piece) { out.append(piece); }
inline void AppendPiece(std::string& out, char piece) { out.push_back(piece); }
template <std::integral T>
requires(!std::same_as<T, char> && !std::same_as<T, bool>) void AppendPiece(std::string& out,
                                                                            T value) {
  out.append(std::to_string(value));
}

// Concatenates strings, string views, C strings, chars and integers.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (AppendPiece(out, args), ...);
  return out;
}

// Splits on `sep`; empty pieces are kept.
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

// Strips ASCII spaces and tabs from both ends.
inline std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace kvindex::ingest::internal
