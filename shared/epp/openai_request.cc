#include "shared/epp/openai_request.h"

#include <simdjson.h>

#include <string>

namespace kvindex::epp {
namespace {

Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// A token-id array: every element an unsigned 32-bit integer.
bool ReadTokens(simdjson::dom::array array, std::vector<uint32_t>* out) {
  out->clear();
  out->reserve(array.size());
  for (simdjson::dom::element element : array) {
    uint64_t value = 0;
    if (element.get_uint64().get(value) != simdjson::SUCCESS || value > UINT32_MAX) return false;
    out->push_back(static_cast<uint32_t>(value));
  }
  return true;
}

// prompt: "text" | [ids] | ["text", ...] | [[ids], ...]; a batch uses its first.
Status ReadPrompt(simdjson::dom::element prompt, OpenAiRequest* out) {
  std::string_view text;
  if (prompt.get_string().get(text) == simdjson::SUCCESS) {
    out->prompt_text.assign(text);
    out->has_prompt_text = true;
    return absl::OkStatus();
  }
  simdjson::dom::array array;
  if (prompt.get_array().get(array) != simdjson::SUCCESS) {
    return Invalid("field 'prompt' must be a string or an array");
  }
  if (array.size() == 0) return Invalid("field 'prompt' is an empty array");
  simdjson::dom::element first = array.at(0).value_unsafe();
  if (first.get_string().get(text) == simdjson::SUCCESS) {
    out->prompt_text.assign(text);
    out->has_prompt_text = true;
    return absl::OkStatus();
  }
  simdjson::dom::array inner;
  if (first.get_array().get(inner) == simdjson::SUCCESS) {
    if (!ReadTokens(inner, &out->prompt_tokens)) {
      return Invalid("field 'prompt' element 0: expected an array of token ids");
    }
  } else if (!ReadTokens(array, &out->prompt_tokens)) {
    return Invalid("field 'prompt': expected token ids (unsigned 32-bit integers)");
  }
  out->has_prompt_tokens = true;
  return absl::OkStatus();
}

}  // namespace

void OpenAiRequest::Clear() {
  kind = Kind::kCompletions;
  model.clear();
  has_prompt_tokens = has_prompt_text = false;
  prompt_tokens.clear();
  prompt_text.clear();
  cache_salt.clear();
}

Status ParseOpenAiRequest(std::string_view body, std::string_view path, OpenAiRequest* out) {
  out->Clear();
  if (size_t q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  const bool chat_path = path.ends_with("/chat/completions");
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  // realloc_if_needed: the body is copied into padded storage when needed.
  if (auto error = parser.parse(body.data(), body.size(), true).get(root);
      error != simdjson::SUCCESS) {
    return Invalid(std::string("invalid JSON: ") + simdjson::error_message(error));
  }
  simdjson::dom::object object;
  if (root.get_object().get(object) != simdjson::SUCCESS) {
    return Invalid("request body must be a JSON object");
  }
  std::string_view model;
  if (object["model"].get_string().get(model) != simdjson::SUCCESS || model.empty()) {
    return Invalid("missing field 'model' (a non-empty string)");
  }
  out->model.assign(model);
  std::string_view salt;
  if (object["cache_salt"].get_string().get(salt) == simdjson::SUCCESS) out->cache_salt = salt;

  simdjson::dom::element prompt;
  const bool has_prompt = object["prompt"].get(prompt) == simdjson::SUCCESS && !prompt.is_null();
  simdjson::dom::array messages;
  const bool has_messages = object["messages"].get_array().get(messages) == simdjson::SUCCESS;
  if (chat_path || (!has_prompt && has_messages)) {
    if (!has_messages) return Invalid("missing field 'messages' (an array)");
    out->kind = OpenAiRequest::Kind::kChat;
    return absl::OkStatus();
  }
  if (!has_prompt) return Invalid("missing field 'prompt'");
  out->kind = OpenAiRequest::Kind::kCompletions;
  return ReadPrompt(prompt, out);
}

}  // namespace kvindex::epp
