// Chat templates: renders a model's `chat_template` (tokenizer_config.json)
// for OpenAI-style messages exactly as transformers' apply_chat_template
// does (Python Jinja2, ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, loop controls, its tojson/raise_exception/strftime_now), or
// refuses. A template using a Jinja2 feature outside the implemented subset
// fails Parse with Unimplemented naming it: the caller then falls back to the
// engine's render endpoint rather than hashing ids that might be wrong.
// docs/chat-templates.md lists what is supported.
//
//   KVINDEX_ASSIGN_OR_RETURN(auto tmpl, ChatTemplate::Parse(source));
//   KVINDEX_ASSIGN_OR_RETURN(std::string prompt, tmpl.Render(context));
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "shared/base/status.h"
#include "shared/tokenize/chat_template/interpreter.h"

namespace kvindex::chat_template {

struct Node;

class ChatTemplate {
 public:
  // InvalidArgument: a syntax error (Jinja2 would raise too).
  // Unimplemented: valid Jinja2 outside the supported subset.
  static StatusOr<ChatTemplate> Parse(std::string_view source);

  // Renders with `context` as the template's variables (a JSON object; key
  // order is kept, as Python dicts keep it, which tojson shows).
  // InvalidArgument: the template raised (raise_exception: the message
  // follows kRaisedPrefix) or failed as Jinja2 would (undefined attribute of
  // an undefined value, a type error). Unimplemented: the data led to an
  // operation outside the subset (for example upper() of non-ASCII text).
  StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                               const RenderLimits& limits = {}) const;

  // vLLM's content-format detection ("auto"): true ("openai" format) when
  // the template loops over a message's content, so vLLM hands it content
  // as a list of parts; false ("string"): content flattened to a string.
  // content_format.cc.
  bool IteratesMessageContent() const;

 private:
  std::shared_ptr<const std::vector<Node>> body_;
};

// Builds the context transformers builds for apply_chat_template and
// renders the config's chat_template: messages, tools (None when absent),
// documents (None), add_generation_prompt, the special tokens of the config
// (bos_token, eos_token, unk_token, pad_token, ... as strings; an AddedToken
// dict gives its "content"; null ones are left undefined), then `extra`
// (vLLM's chat_template_kwargs, e.g. enable_thinking) over them.
// chat_template may be a string or a list of {name, template}: "default", or
// "tool_use" when tools are given and such a template exists.
// FailedPrecondition when the config has no chat template. The config is a
// plain (sorted-map) nlohmann::json: only chat_template and the special
// tokens are read, and a large added_tokens_decoder parses fast that way;
// messages, tools and extra keep their key order (tojson shows it).
StatusOr<std::string> RenderChat(
    const nlohmann::json& tokenizer_config, const nlohmann::ordered_json& messages,
    bool add_generation_prompt, const nlohmann::ordered_json& tools = nullptr,
    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// The template source RenderChat would use (same selection rules).
StatusOr<std::string> SelectTemplate(const nlohmann::json& tokenizer_config, bool has_tools);

// The context RenderChat renders with.
nlohmann::ordered_json ChatContext(
    const nlohmann::json& tokenizer_config, const nlohmann::ordered_json& messages,
    bool add_generation_prompt, const nlohmann::ordered_json& tools = nullptr,
    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace kvindex::chat_template
