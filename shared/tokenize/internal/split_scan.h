// Scanning helpers shared by the hand-written split matchers (fast_split.cc,
// deepseek_split.cc): a code point's class at a byte offset, and the end of
// the whitespace alternatives both pattern families end with.
#pragma once

#include <cstddef>
#include <string_view>

#include "shared/tokenize/code_point_class.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize::internal {

// A code point's class and byte length at text[i] (valid UTF-8, i < size).
struct At {
  CharClass cls;
  size_t len;
};

inline At ClassAt(const CodePointClasses& classes, std::string_view text, size_t i) {
  auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) return {classes.Of(b), 1};
  size_t len = 0;
  char32_t cp = DecodeUtf8(text, i, &len);
  return {classes.Of(cp), len};
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at `pos`, whose code point is White_Space: the
// end of the match over the run of White_Space starting there.
inline size_t WhitespaceMatchEnd(const CodePointClasses& classes, std::string_view text,
                                 size_t pos) {
  const size_t n = text.size();
  size_t last_newline = n;  // none
  size_t last_start = pos;  // start of the run's last code point
  size_t i = pos;
  while (i < n) {
    At at = ClassAt(classes, text, i);
    if (at.cls != CharClass::kSpace) break;
    if (text[i] == '\r' || text[i] == '\n') last_newline = i;
    last_start = i;
    i += at.len;
  }
  if (last_newline != n) return last_newline + 1;  // \s* backs off to the last newline
  if (i == n || last_start == pos) return i;       // (?!\S) holds at the end; else \s+
  return last_start;                               // leave one space before the \S
}

}  // namespace kvindex::tokenize::internal
