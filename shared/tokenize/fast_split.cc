#include "shared/tokenize/fast_split.h"

#include "shared/tokenize/internal/split_scan.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

using internal::At;
using internal::ClassAt;

// The lower-case ASCII letter a code point matches caselessly in the
// contractions (PCRE2's simple case folding: ſ U+017F folds to s), or 0.
inline char ContractionLetter(std::string_view text, size_t i, size_t* len) {
  auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) {
    *len = 1;
    return static_cast<char>(b >= 'A' && b <= 'Z' ? b + ('a' - 'A') : b);
  }
  char32_t cp = DecodeUtf8(text, i, len);
  return cp == 0x17F ? 's' : 0;  // LATIN SMALL LETTER LONG S
}

}  // namespace

std::optional<FastSplit> FastSplit::ForPattern(std::string_view pattern) {
  if (pattern == kLlama3Pattern) return FastSplit(3, &CodePointClasses::Get());
  if (pattern == kQwenPattern) return FastSplit(1, &CodePointClasses::Get());
  return std::nullopt;
}

size_t FastSplit::MatchEnd(std::string_view text, size_t pos) const {
  const CodePointClasses& classes = *classes_;
  const size_t n = text.size();
  const auto first_byte = static_cast<unsigned char>(text[pos]);
  const At first = ClassAt(classes, text, pos);
  auto run_end = [&](size_t i, CharClass cls) {
    while (i < n) {
      // ASCII runs (most text) without decoding.
      auto b = static_cast<unsigned char>(text[i]);
      if (b < 0x80) {
        if (classes.Of(b) != cls) break;
        ++i;
        continue;
      }
      At at = ClassAt(classes, text, i);
      if (at.cls != cls) break;
      i += at.len;
    }
    return i;
  };

  // (?i:'s|'t|'re|'ve|'m|'ll|'d), alternatives in order.
  if (first_byte == '\'' && pos + 1 < n) {
    size_t len = 0;
    const char c = ContractionLetter(text, pos + 1, &len);
    const size_t after = pos + 1 + len;
    if (c == 's' || c == 't') return after;
    if ((c == 'r' || c == 'v') && after < n) {
      size_t len2 = 0;
      if (ContractionLetter(text, after, &len2) == 'e') return after + len2;
    }
    if (c == 'm') return after;
    if (c == 'l' && after < n) {
      size_t len2 = 0;
      if (ContractionLetter(text, after, &len2) == 'l') return after + len2;
    }
    if (c == 'd') return after;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (first.cls == CharClass::kLetter) return run_end(pos + first.len, CharClass::kLetter);
  if (first.cls != CharClass::kNumber && first_byte != '\r' && first_byte != '\n' &&
      pos + first.len < n && ClassAt(classes, text, pos + first.len).cls == CharClass::kLetter) {
    return run_end(pos + first.len, CharClass::kLetter);
  }
  // \p{N}{1,max}
  if (first.cls == CharClass::kNumber) {
    size_t i = pos + first.len;
    for (int count = 1; count < max_digits_ && i < n; ++count) {
      At at = ClassAt(classes, text, i);
      if (at.cls != CharClass::kNumber) break;
      i += at.len;
    }
    return i;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t other = first.cls == CharClass::kOther ? pos : n;
  if (first_byte == ' ' && pos + 1 < n &&
      ClassAt(classes, text, pos + 1).cls == CharClass::kOther) {
    other = pos + 1;
  }
  if (other < n) {
    size_t i = run_end(other, CharClass::kOther);
    while (i < n && (text[i] == '\r' || text[i] == '\n')) ++i;
    return i;
  }
  // The first code point is White_Space: \s*[\r\n]+ | \s+(?!\S) | \s+ over
  // the run of White_Space starting here.
  return internal::WhitespaceMatchEnd(classes, text, pos);
}

}  // namespace kvindex::tokenize
