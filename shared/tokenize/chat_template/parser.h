// Parses Jinja2 tokens into a syntax tree, accepting only the subset the
// interpreter implements. Anything else is refused with Unimplemented naming
// the construct (a statement, filter, test, method or syntax), so a caller
// can fall back to the engine's render endpoint; malformed templates are
// InvalidArgument, as Jinja2 would raise TemplateSyntaxError.
#pragma once

#include <string_view>

#include "shared/base/status.h"
#include "shared/tokenize/chat_template/ast.h"

namespace kvindex::chat_template {

StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace kvindex::chat_template
