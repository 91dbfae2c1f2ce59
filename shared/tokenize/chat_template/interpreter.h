// Renders a parsed template (ast.h) against a context dict with Jinja2's
// semantics under transformers' environment: scoping (a for loop's body is a
// fresh scope each iteration; namespace() is the way out), loop.*,
// break/continue, macros, set, Python operators, and the globals
// raise_exception, strftime_now, namespace, range and dict.
#pragma once

#include <string>

#include "shared/base/status.h"
#include "shared/tokenize/chat_template/ast.h"
#include "shared/tokenize/chat_template/value.h"

namespace kvindex::chat_template {

// Bounds on one rendering, so a hostile or broken template cannot run away:
// exceeding one is ResourceExhausted.
struct RenderLimits {
  size_t max_output_bytes = 64u << 20;
  size_t max_steps = 10'000'000;  // statements and loop iterations executed
  int max_call_depth = 64;        // nested macro calls
};

// raise_exception(msg) fails the rendering with InvalidArgument whose
// message starts with this prefix followed by msg.
inline constexpr char kRaisedPrefix[] = "raise_exception: ";

StatusOr<std::string> RenderTemplate(const Body& body, const Dict& context,
                                     const RenderLimits& limits = {});

}  // namespace kvindex::chat_template
