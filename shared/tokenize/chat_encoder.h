// ChatEncoder: a model's chat template (tokenizer_config.json), parsed once
// at load, turning a ChatRequest into the prompt vLLM renders for it, and
// EncodeChat into the ids vLLM computes: its message preprocessing
// (chat_messages.h) for the template's content format (detected as vLLM
// detects it), transformers' apply_chat_template context (chat_template.h),
// then the tokenizer without special tokens unless the request asks
// (vLLM's chat default add_special_tokens = false; the template writes BOS).
//
// Unimplemented / FailedPrecondition: this request or model cannot be
// rendered here (no template, a template outside the Jinja subset,
// multimodal content, continue_final_message, a template in the request):
// the caller falls back to the engine's render endpoint. InvalidArgument:
// the request's fault (the template raised, bad message shapes), which vLLM
// would refuse too. Thread-safe (const).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "shared/base/status.h"
#include "shared/tokenize/chat_messages.h"
#include "shared/tokenize/chat_request.h"
#include "shared/tokenize/chat_template/chat_template.h"

namespace kvindex::tokenize {

class Tokenizer;

class ChatEncoder {
 public:
  // FailedPrecondition: no chat_template; the parse error of a template
  // outside the subset (Unimplemented) or malformed (InvalidArgument).
  static StatusOr<std::unique_ptr<ChatEncoder>> FromConfig(const nlohmann::json& config);

  // The prompt text vLLM renders for `request`.
  StatusOr<std::string> Render(const ChatRequest& request) const;

  // The content format of the template used with (has_tools) or without tools.
  ContentFormat format(bool has_tools) const;

 private:
  struct Variant {
    chat_template::ChatTemplate tmpl;
    ContentFormat format;
  };
  ChatEncoder() = default;
  std::unique_ptr<Variant> plain_, with_tools_;
  nlohmann::json special_;  // the config's special tokens (ChatContext reads them)
};

// The ids vLLM computes for a chat request to this tokenizer's model:
// Render, then Encode(prompt, request.add_special_tokens).
StatusOr<std::vector<uint32_t>> EncodeChat(const Tokenizer& tokenizer, const ChatRequest& request);

}  // namespace kvindex::tokenize
