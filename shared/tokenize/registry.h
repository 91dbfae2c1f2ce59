// TokenizerRegistry: model name -> loaded Tokenizer, from repeatable
// `--tokenizer MODEL=DIR` specs (router, kvindex-ctl; docs/tokenize.md).
// Built once at startup, then read-only: Find is safe from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/tokenize/tokenizer.h"

namespace kvindex::tokenize {

class TokenizerRegistry {
 public:
  // Loads every "MODEL=DIR" spec; the first failure (bad spec, duplicate
  // model, a tokenizer that does not load) is returned naming the spec.
  static StatusOr<std::unique_ptr<TokenizerRegistry>> Load(const std::vector<std::string>& specs);

  // nullptr if no tokenizer was configured for `model`.
  const Tokenizer* Find(std::string_view model) const;
  size_t size() const { return tokenizers_.size(); }

  // Splits "MODEL=DIR" (both non-empty).
  static Status ParseSpec(std::string_view spec, std::string* model, std::string* dir);

 private:
  std::map<std::string, std::unique_ptr<Tokenizer>, std::less<>> tokenizers_;
};

}  // namespace kvindex::tokenize
