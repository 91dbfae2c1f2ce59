// Normalizer: the `normalizer` of tokenizer.json, applied to each piece of
// text between added tokens. Supported: Sequence, NFC, NFD, NFKC, NFKD
// (utf8proc), Replace (String or Regex pattern), Prepend, Strip. Anything
// else is refused at load with its name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json_fwd.hpp"
#include "shared/base/status.h"
#include "shared/tokenize/regex.h"

namespace kvindex::tokenize {

class Normalizer {
 public:
  // `spec` is the JSON value of "normalizer" (null = none).
  static StatusOr<Normalizer> FromJson(const nlohmann::json& spec);

  bool empty() const { return steps_.empty(); }
  // Normalizes `text` (valid UTF-8) in place; fails only on a regex resource limit.
  Status Apply(std::string* text) const;

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
