// Normalizer: the `normalizer` of tokenizer.json, applied to each piece of
// text between added tokens. Supported: Sequence, NFC, NFD, NFKC, NFKD
// (utf8proc), Replace (String or Regex pattern), Prepend, Strip. Anything
// else is refused at load with its name.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "nlohmann/json_fwd.hpp"
#include "shared/base/status.h"
#include "shared/tokenize/regex.h"

namespace kvindex::tokenize {

class Normalizer {
 public:
  // `spec` is the JSON value of "normalizer" (null = none).
  static StatusOr<Normalizer> FromJson(const nlohmann::json& spec);

  bool empty() const { return steps_.empty(); }
  // Normalizes `text` (valid UTF-8) in place; fails only on a regex resource
  // limit. `segment_start` = false: `text` continues a piece of text whose
  // start was normalized before, Prepend steps are skipped (only valid for a
  // character-wise normalizer, see below).
  Status Apply(std::string* text, bool segment_start = true) const;

  // A normalizer made only of Prepend and Replace steps whose String
  // patterns are one character each maps text character by character:
  // Apply(a + b) == Apply(a) + Apply(b, false) for any cut between
  // characters. Then: the image of each character it changes (the others
  // map to themselves) and what Prepend puts first; nullopt for any other
  // normalizer (or none).
  struct Charwise {
    absl::flat_hash_map<char32_t, std::string> images;
    std::string prepended;  // the image of an empty prefix at a segment start
  };
  std::optional<Charwise> CharwiseImages() const;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kReplaceString, kReplaceRegex, kPrepend, kStrip };
  struct Step {
    Kind kind;
    std::string pattern;  // kReplaceString: the literal
    std::string content;  // kReplace*: the replacement; kPrepend: the prefix
    std::shared_ptr<const Regex> regex;
    bool strip_left = false, strip_right = false;
  };
  static Status Add(const nlohmann::json& spec, std::vector<Step>* steps);

  std::vector<Step> steps_;
};

}  // namespace kvindex::tokenize
