// PreTokenizer: the `pre_tokenizer` of tokenizer.json, cutting normalized
// text into the words BPE sees. Supported: Sequence, Split (String or Regex
// pattern; Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous;
// invert), ByteLevel (add_prefix_space, use_regex: the GPT-2 pattern) and
// Metaspace (replacement, prepend_scheme always/first/never, split).
//
// ByteLevel's byte-to-character mapping is not applied: byte-level models
// run BPE on raw bytes with a vocabulary mapped back to bytes at load
// (bpe.h), which gives the same ids without rewriting the text.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json_fwd.hpp"
#include "shared/base/status.h"
#include "shared/tokenize/deepseek_split.h"
#include "shared/tokenize/fast_split.h"
#include "shared/tokenize/regex.h"

namespace kvindex::tokenize {

// A piece of text; `at_start` = it begins at offset 0 of the caller's input
// (Metaspace's prepend_scheme "first" looks at it).
struct Piece {
  std::string_view text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  // `spec` is the JSON value of "pre_tokenizer" (null = none).
  static StatusOr<PreTokenizer> FromJson(const nlohmann::json& spec);

  // True if a ByteLevel step is present: the model works on bytes.
  bool byte_level() const { return byte_level_; }
  // True if no pre-token can span "\n" followed by a non-space character,
  // and none is decided by text past that character: byte-level splits with
  // the patterns of Llama 3, Qwen 2/3, DeepSeek V3 or GPT-2 only (each
  // alternative of those stops at such a boundary, looking at most at the
  // character after it). The prefix cache may resume at such a line start.
  bool LinesAreBoundaries() const;
  // True if Split keeps a text in which `absent` never occurs as one piece
  // (at_start kept): no steps, or only non-inverted Splits on a String that
  // contains `absent` (Gemma 3's split on " " after its normalizer replaced
  // every space).
  bool KeepsWholeWithout(char absent) const;

  // Cuts `input` into words, appended to *out. Text the steps rewrite
  // (Metaspace, prefix spaces) lives in *arena, which must outlive *out.
  Status Split(Piece input, std::deque<std::string>* arena, std::vector<Piece>* out) const;

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    Kind kind;
    std::shared_ptr<const Regex> regex;  // kSplit with a Regex; ByteLevel use_regex
    std::optional<FastSplit> fast;       // the same pattern, hand-written (fast_split.h)
    std::optional<DeepSeekSplit> find;   // or its matches, hand-written (deepseek_split.h)
    std::string literal;                 // kSplit with a String
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    Prepend prepend = Prepend::kAlways;
    bool split = true;
  };
  static Status Add(const nlohmann::json& spec, std::vector<Step>* steps, bool* byte_level);
  static Status SplitPiece(const Step& step, Piece piece, std::vector<Piece>* out);
  Status ApplyStep(const Step& step, const std::vector<Piece>& in, std::deque<std::string>* arena,
                   std::vector<Piece>* out) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace kvindex::tokenize
