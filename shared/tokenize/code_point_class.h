// CodePointClasses: the class of every Unicode code point as the split
// patterns see it: a letter (\p{L}), a number (\p{N}), White_Space (what
// Oniguruma's \s means, regex.h), or other; the detailed table (DeepSeek V3's
// patterns, deepseek_split.h) also tells marks (\p{M}), punctuation (\p{P})
// and symbols (\p{S}) apart from other. Letters and numbers are read off
// PCRE2 itself at build time, so a hand-written splitter (fast_split.h)
// classifies exactly as the PCRE2 path it replaces, whatever Unicode version
// the installed PCRE2 carries.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kvindex::tokenize {

enum class CharClass : uint8_t {
  kOther = 0,
  kLetter = 1,
  kNumber = 2,
  kSpace = 3,
  // Only in the detailed table:
  kMark = 4,
  kPunct = 5,
  kSymbol = 6,
};

class CodePointClasses {
 public:
  // Built once per process (a few milliseconds), then shared read-only.
  static const CodePointClasses& Get();
  // The same with marks, punctuation and symbols told apart.
  static const CodePointClasses& GetDetailed();

  CharClass Of(char32_t cp) const {
    if (cp < 0x80) return static_cast<CharClass>(ascii_[cp]);
    if (cp > 0x10FFFF) return CharClass::kOther;
    return static_cast<CharClass>(pages_[page_of_[cp >> 8]][cp & 0xFF]);
  }

 private:
  explicit CodePointClasses(bool detailed);

  std::array<uint8_t, 128> ascii_{};
  std::vector<uint16_t> page_of_;                // code point >> 8 -> index in pages_
  std::vector<std::array<uint8_t, 256>> pages_;  // distinct pages only
};

}  // namespace kvindex::tokenize
