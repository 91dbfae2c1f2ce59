// ChatRequest: the part of an OpenAI chat-completions request that decides
// the prompt vLLM builds (messages, tools, add_generation_prompt, ...), read
// from the request's JSON: the body of /v1/chat/completions (the EPP), of
// POST /v1/match with "messages", or a kvindex-ctl --chat file (such a body
// or a bare messages array). Key order is kept: Python dicts keep it and
// templates show it (tojson).
#pragma once

#include <string_view>

#include "nlohmann/json.hpp"
#include "shared/base/status.h"

namespace kvindex::tokenize {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // as sent
  nlohmann::ordered_json tools = nullptr;                             // as sent; null = none
  nlohmann::ordered_json documents = nullptr;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  // vLLM's defaults for /v1/chat/completions.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
  bool has_request_template = false;  // "chat_template" given in the request
};

// Deepest JSON nesting accepted (objects and arrays): deeper -> InvalidArgument.
inline constexpr int kMaxChatJsonDepth = 64;

// InvalidArgument naming the field when the JSON is malformed, nested deeper
// than kMaxChatJsonDepth, has no "messages" array, or a known field has the
// wrong type. Other fields are ignored.
StatusOr<ChatRequest> ParseChatRequest(std::string_view json);

}  // namespace kvindex::tokenize
