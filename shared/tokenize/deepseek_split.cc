#include "shared/tokenize/deepseek_split.h"

#include "shared/tokenize/internal/split_scan.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

using internal::At;
using internal::ClassAt;

inline bool IsCjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

inline bool IsAsciiLetter(unsigned char b) { return (b | 0x20) >= 'a' && (b | 0x20) <= 'z'; }

// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]: every printable ASCII character
// that is not a letter, a digit or the space.
inline bool IsAsciiPunct(unsigned char b) {
  return b > ' ' && b < 0x7F && !IsAsciiLetter(b) && !(b >= '0' && b <= '9');
}

inline bool LetterOrMark(CharClass c) { return c == CharClass::kLetter || c == CharClass::kMark; }
inline bool PunctOrSymbol(CharClass c) { return c == CharClass::kPunct || c == CharClass::kSymbol; }

}  // namespace

std::optional<DeepSeekSplit> DeepSeekSplit::ForPattern(std::string_view pattern) {
  const CodePointClasses* classes = &CodePointClasses::GetDetailed();
  if (pattern == kDigitsPattern) return DeepSeekSplit(Which::kDigits, classes);
  if (pattern == kCjkPattern) return DeepSeekSplit(Which::kCjk, classes);
  if (pattern == kWordsPattern) return DeepSeekSplit(Which::kWords, classes);
  return std::nullopt;
}

bool DeepSeekSplit::Find(std::string_view text, size_t pos, size_t* start, size_t* end) const {
  const size_t n = text.size();
  for (size_t p = pos; p < n; p += Utf8Length(static_cast<unsigned char>(text[p]))) {
    // Skip what cannot start a match without decoding: ASCII that is not a
    // digit (digits), bytes below the lead byte of U+3040 (CJK).
    auto b = static_cast<unsigned char>(text[p]);
    if (which_ == Which::kDigits && b < 0x80 && (b < '0' || b > '9')) continue;
    if (which_ == Which::kCjk && (b < 0xE3 || b > 0xE9)) continue;
    size_t e = MatchAt(text, p);
    if (e > p) {
      *start = p;
      *end = e;
      return true;
    }
  }
  return false;
}

size_t DeepSeekSplit::MatchAt(std::string_view text, size_t pos) const {
  const CodePointClasses& classes = *classes_;
  const size_t n = text.size();
  switch (which_) {
    case Which::kDigits: {
      size_t i = pos;
      for (int count = 0; count < 3 && i < n; ++count) {
        At at = ClassAt(classes, text, i);
        if (at.cls != CharClass::kNumber) break;
        i += at.len;
      }
      return i;
    }
    case Which::kCjk: {
      size_t i = pos;
      while (i < n) {
        size_t len = 0;
        if (!IsCjk(DecodeUtf8(text, i, &len))) break;
        i += len;
      }
      return i;
    }
    case Which::kWords:
      return WordsMatchAt(text, pos);
  }
  return pos;
}

size_t DeepSeekSplit::WordsMatchAt(std::string_view text, size_t pos) const {
  const CodePointClasses& classes = *classes_;
  const size_t n = text.size();
  auto run_end = [&](size_t i, bool (*in)(CharClass)) {
    while (i < n) {
      At at = ClassAt(classes, text, i);
      if (!in(at.cls)) break;
      i += at.len;
    }
    return i;
  };
  const auto b0 = static_cast<unsigned char>(text[pos]);
  const At c0 = ClassAt(classes, text, pos);
  const size_t p1 = pos + c0.len;
  // [!"#...~][A-Za-z]+
  if (IsAsciiPunct(b0) && p1 < n && IsAsciiLetter(static_cast<unsigned char>(text[p1]))) {
    size_t i = p1;
    while (i < n && IsAsciiLetter(static_cast<unsigned char>(text[i]))) ++i;
    return i;
  }
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : a letter or mark starts the run
  // (a mark taken by the optional class ends at the same place).
  if (LetterOrMark(c0.cls)) return run_end(pos, LetterOrMark);
  if (b0 != '\r' && b0 != '\n' && !PunctOrSymbol(c0.cls) && p1 < n &&
      LetterOrMark(ClassAt(classes, text, p1).cls)) {
    return run_end(p1, LetterOrMark);
  }
  //  ?[\p{P}\p{S}]+[\r\n]*
  size_t ps = n;  // none
  if (PunctOrSymbol(c0.cls)) {
    ps = pos;
  } else if (b0 == ' ' && p1 < n && PunctOrSymbol(ClassAt(classes, text, p1).cls)) {
    ps = p1;
  }
  if (ps < n) {
    size_t i = run_end(ps, PunctOrSymbol);
    while (i < n && (text[i] == '\r' || text[i] == '\n')) ++i;
    return i;
  }
  if (c0.cls != CharClass::kSpace) return pos;  // no alternative starts here
  // \s*[\r\n]+ | \s+(?!\S) | \s+ over the run of White_Space starting here.
  return internal::WhitespaceMatchEnd(classes, text, pos);
}

}  // namespace kvindex::tokenize
