// Regex: a PCRE2 pattern compiled once with JIT, matched over valid UTF-8
// (Unicode classes \p{L}, \p{N}, \s follow Unicode through PCRE2_UCP). The
// split patterns of tokenizer.json are written for Oniguruma; the subset they
// use (classes, lookahead, (?i:...), counted repeats) means the same in PCRE2.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "shared/base/status.h"

struct pcre2_real_code_8;

namespace kvindex::tokenize {

class Regex {
 public:
  static StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(start, end) for each leftmost non-overlapping match in
  // `text` (valid UTF-8), in order; an empty match advances one code point
  // and is not reported. Returns an error only if PCRE2 fails (resource limit).
  template <typename F>
  Status ForEachMatch(std::string_view text, F&& on_match) const {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t start = 0, end = 0;
      int rc = MatchAt(text, pos, &start, &end);
      if (rc == 0) break;
      if (rc < 0) return MatchError(rc);
      if (end == start) {
        pos = start + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      on_match(start, end);
      pos = end;
    }
    return Status();
  }

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::string pattern, pcre2_real_code_8* code) : pattern_(std::move(pattern)), code_(code) {}
  // 1 = match in [*start, *end), 0 = none, < 0 = PCRE2 error code.
  int MatchAt(std::string_view text, size_t pos, size_t* start, size_t* end) const;
  Status MatchError(int rc) const;

  std::string pattern_;
  pcre2_real_code_8* code_;
};

}  // namespace kvindex::tokenize
