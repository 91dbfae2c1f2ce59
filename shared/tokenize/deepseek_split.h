// DeepSeekSplit: hand-written matchers for the three split patterns of
// DeepSeek V3's pre-tokenizer (each an Isolated Split step, in this order):
//   \p{N}{1,3}
//   [\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+
//   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
//    ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Unlike Llama 3's pattern (fast_split.h) these leave gaps (text no
// alternative matches), so each gives the leftmost match from a position, as
// PCRE2 does; the pre-tokenizer keeps the gaps as its Split behaviour says.
// Classes come from PCRE2 itself (code_point_class.h, the detailed table);
// deepseek_split_test compares the matches with PCRE2's on seeded random text.
// Chosen at load when a step's pattern is one of these (pre_tokenizer.cc).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "shared/tokenize/code_point_class.h"

namespace kvindex::tokenize {

class DeepSeekSplit {
 public:
  // The three patterns, as tokenizer.json writes them.
  static constexpr std::string_view kDigitsPattern = R"(\p{N}{1,3})";
  static constexpr std::string_view kCjkPattern = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
  static constexpr std::string_view kWordsPattern =
      "[!\"#$%&'()*+,\\-./"
      ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

  // The matcher for `pattern` (as tokenizer.json writes it), if it is one of
  // the patterns above.
  static std::optional<DeepSeekSplit> ForPattern(std::string_view pattern);

  // The leftmost match in `text` (valid UTF-8) starting at or after `pos`:
  // true and [*start, *end) (never empty), or false if there is none.
  bool Find(std::string_view text, size_t pos, size_t* start, size_t* end) const;

 private:
  enum class Which { kDigits, kCjk, kWords };
  DeepSeekSplit(Which which, const CodePointClasses* classes) : which_(which), classes_(classes) {}
  // End of the match starting at `pos`, or `pos` if none starts there.
  size_t MatchAt(std::string_view text, size_t pos) const;
  size_t WordsMatchAt(std::string_view text, size_t pos) const;

  Which which_;
  const CodePointClasses* classes_;
};

}  // namespace kvindex::tokenize
