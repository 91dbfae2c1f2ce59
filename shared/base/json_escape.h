// The one JSON string escaper of kvindex (HTTP bodies, JSON logs): appends
// `text` escaped per RFC 8259, without the surrounding quotes. Bytes that
// are not UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
// U+10FFFF) become U+FFFD, one per byte, so the output is always valid JSON
// whatever a client sent (error messages echo header bytes; found by
// tests/fuzz/http_request_fuzz).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvindex {

// The length of the well-formed UTF-8 sequence that starts at text[i]
// (a byte >= 0x80), or 0 when there is none.
inline size_t Utf8SequenceAt(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xbf) {
    return i + k < text.size() && byte(k) >= lo && byte(k) <= hi;
  };
  const unsigned lead = byte(0);
  if (lead >= 0xc2 && lead <= 0xdf) return cont(1) ? 2 : 0;
  if (lead >= 0xe0 && lead <= 0xef) {
    const bool second = lead == 0xe0 ? cont(1, 0xa0) : lead == 0xed ? cont(1, 0x80, 0x9f) : cont(1);
    return second && cont(2) ? 3 : 0;
  }
  if (lead >= 0xf0 && lead <= 0xf4) {
    const bool second = lead == 0xf0 ? cont(1, 0x90) : lead == 0xf4 ? cont(1, 0x80, 0x8f) : cont(1);
    return second && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

inline void AppendJsonEscaped(std::string_view text, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  // Fast path: most names are ASCII and need no escaping; append them in
  // one go.
  size_t plain = 0;
  while (plain < text.size()) {
    const auto u = static_cast<unsigned char>(text[plain]);
    if (u < 0x20 || u == '"' || u == '\\' || u >= 0x80) break;
    ++plain;
  }
  out->append(text.data(), plain);
  for (size_t i = plain; i < text.size(); ++i) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (u < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[u >> 4]);
          out->push_back(kHex[u & 15]);
        } else if (u < 0x80) {
          out->push_back(c);
        } else if (const size_t n = Utf8SequenceAt(text, i); n != 0) {
          out->append(text.data() + i, n);
          i += n - 1;
        } else {
          out->append("\xef\xbf\xbd");  // U+FFFD
        }
    }
  }
}

}  // namespace kvindex
