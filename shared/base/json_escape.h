// The one JSON string escaper of kvindex (HTTP bodies, JSON logs): appends
// `text` escaped per RFC 8259, without the surrounding quotes.
#pragma once

#include <string>
#include <string_view>

namespace kvindex {

inline void AppendJsonEscaped(std::string_view text, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  // Fast path: most names need no escaping; append them in one go.
  size_t plain = 0;
  while (plain < text.size()) {
    const auto u = static_cast<unsigned char>(text[plain]);
    if (u < 0x20 || u == '"' || u == '\\') break;
    ++plain;
  }
  out->append(text.data(), plain);
  text.remove_prefix(plain);
  for (char c : text) {
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
        } else {
          out->push_back(c);
        }
    }
  }
}

}  // namespace kvindex
