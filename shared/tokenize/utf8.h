// UTF-8 helpers for the tokenizer: validation (Hugging Face's Rust API only
// accepts valid UTF-8, so invalid input is refused with the byte offset) and
// one-code-point decoding of already validated text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvindex::tokenize {

// Offset of the first byte that is not part of a well-formed UTF-8 sequence
// (overlongs, surrogates and code points above U+10FFFF included), or npos.
size_t FindInvalidUtf8(std::string_view text);

// Length in bytes of the UTF-8 sequence starting with lead byte `b` (valid text).
inline size_t Utf8Length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

// Decodes the code point at text[i] (valid text); sets *len to its byte length.
inline char32_t DecodeUtf8(std::string_view text, size_t i, size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
  size_t n = Utf8Length(p[0]);
  *len = n;
  switch (n) {
    case 1:
      return p[0];
    case 2:
      return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3:
      return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
             (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

void AppendUtf8(char32_t cp, std::string* out);

// Unicode White_Space (Rust's char::is_whitespace).
bool IsUnicodeWhitespace(char32_t cp);

}  // namespace kvindex::tokenize
