// Splits a template into text and tag tokens exactly as Jinja2's lexer does
// with transformers' settings (trim_blocks, lstrip_blocks, the default
// newline handling: \r\n and \r become \n, one trailing newline dropped), and
// the inside of {{ }} / {% %} into names, literals and operators. Comments
// are dropped after their whitespace effects are applied.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::chat_template {

struct Token {
  enum class Kind {
    kData,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Kind kind;
  std::string text;  // data, name, decoded string literal, literal digits, operator
  int line = 1;
};

StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace kvindex::chat_template
