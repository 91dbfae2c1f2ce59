#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {

size_t FindInvalidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      __builtin_memcpy(&word, p + i, 8);
      if (word & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    auto cont = [&](size_t k) { return i + k < n && (p[i + k] & 0xC0) == 0x80; };
    if (b >= 0xC2 && b <= 0xDF) {
      if (!cont(1)) return i;
      i += 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      if (!cont(1) || !cont(2)) return i;
      unsigned char b1 = p[i + 1];
      if (b == 0xE0 && b1 < 0xA0) return i;   // overlong
      if (b == 0xED && b1 >= 0xA0) return i;  // surrogate
      i += 3;
    } else if (b >= 0xF0 && b <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) return i;
      unsigned char b1 = p[i + 1];
      if (b == 0xF0 && b1 < 0x90) return i;   // overlong
      if (b == 0xF4 && b1 >= 0x90) return i;  // above U+10FFFF
      i += 4;
    } else {
      return i;
    }
  }
  return std::string_view::npos;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsUnicodeWhitespace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace kvindex::tokenize
