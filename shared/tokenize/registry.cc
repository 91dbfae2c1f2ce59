#include "shared/tokenize/registry.h"

#include "absl/strings/str_cat.h"

namespace kvindex::tokenize {

Status TokenizerRegistry::ParseSpec(std::string_view spec, std::string* model, std::string* dir) {
  size_t eq = spec.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer '", std::string(spec), "': expected MODEL=DIR"));
  }
  model->assign(spec.substr(0, eq));
  dir->assign(spec.substr(eq + 1));
  return Status();
}

StatusOr<std::unique_ptr<TokenizerRegistry>> TokenizerRegistry::Load(
    const std::vector<std::string>& specs) {
  auto registry = std::make_unique<TokenizerRegistry>();
  for (const std::string& spec : specs) {
    std::string model, dir;
    KVINDEX_RETURN_IF_ERROR(ParseSpec(spec, &model, &dir));
    if (registry->tokenizers_.contains(model)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenizer: model '", model, "' given twice"));
    }
    auto tokenizer = Tokenizer::Load(dir);
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat("--tokenizer ", spec, ": ", tokenizer.status().message()));
    }
    registry->tokenizers_.emplace(model, std::move(*tokenizer));
  }
  return registry;
}

const Tokenizer* TokenizerRegistry::Find(std::string_view model) const {
  auto it = tokenizers_.find(model);
  return it == tokenizers_.end() ? nullptr : it->second.get();
}

}  // namespace kvindex::tokenize
