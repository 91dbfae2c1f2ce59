// FastSplit: a hand-written matcher for the split pattern of Llama 3 / 3.1
// (numbers in runs of up to three) and Qwen 2 / 3 (one digit at a time):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// It gives the pre-tokens PCRE2 gives for that pattern (fast_split_test
// compares them on seeded random text of every class), without a regex
// engine call per pre-token, which dominated encoding (docs/benchmarks.md,
// "Tokenize"). Every position of valid UTF-8 text starts a match of these
// patterns, so the pre-tokens tile the text.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "shared/tokenize/code_point_class.h"

namespace kvindex::tokenize {

class FastSplit {
 public:
  // The two patterns, as tokenizer.json writes them.
  static constexpr std::string_view kLlama3Pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kQwenPattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

  // The matcher for `pattern` (as tokenizer.json writes it), if it is one of
  // the patterns above.
  static std::optional<FastSplit> ForPattern(std::string_view pattern);

  // End of the pre-token starting at `pos` < text.size(); `text` is valid
  // UTF-8.
  size_t MatchEnd(std::string_view text, size_t pos) const;

 private:
  FastSplit(int max_digits, const CodePointClasses* classes)
      : max_digits_(max_digits), classes_(classes) {}

  int max_digits_;
  const CodePointClasses* classes_;
};

}  // namespace kvindex::tokenize
