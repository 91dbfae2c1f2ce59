#include "shared/tokenize/chat_request.h"

#include <string>

namespace kvindex::tokenize {
namespace {

// Bounds the nesting before nlohmann (and the recursive code after it)
// sees the text.
bool DepthWithin(std::string_view json, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

Status ReadBool(const nlohmann::ordered_json& body, const char* key, bool* out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean())
    return absl::InvalidArgumentError(std::string("field '") + key + "' must be a boolean");
  *out = it->get<bool>();
  return absl::OkStatus();
}

}  // namespace

StatusOr<ChatRequest> ParseChatRequest(std::string_view json) {
  if (!DepthWithin(json, kMaxChatJsonDepth)) {
    return absl::InvalidArgumentError("chat request nested deeper than " +
                                      std::to_string(kMaxChatJsonDepth) + " levels");
  }
  nlohmann::ordered_json body =
      nlohmann::ordered_json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return absl::InvalidArgumentError("chat request: invalid JSON");
  ChatRequest request;
  if (body.is_array()) {
    request.messages = std::move(body);
    return request;
  }
  if (!body.is_object()) {
    return absl::InvalidArgumentError("chat request must be a JSON object or a messages array");
  }
  const auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array()) {
    return absl::InvalidArgumentError("field 'messages' must be an array of messages");
  }
  request.messages = std::move(*messages);
  if (const auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return absl::InvalidArgumentError("field 'tools' must be an array");
    request.tools = std::move(*it);
  }
  if (const auto it = body.find("documents"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return absl::InvalidArgumentError("field 'documents' must be an array");
    request.documents = std::move(*it);
  }
  if (const auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object())
      return absl::InvalidArgumentError("field 'chat_template_kwargs' must be an object");
    request.chat_template_kwargs = std::move(*it);
  }
  if (const auto it = body.find("chat_template"); it != body.end() && !it->is_null()) {
    request.has_request_template = true;
  }
  KVINDEX_RETURN_IF_ERROR(ReadBool(body, "add_generation_prompt", &request.add_generation_prompt));
  KVINDEX_RETURN_IF_ERROR(
      ReadBool(body, "continue_final_message", &request.continue_final_message));
  KVINDEX_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &request.add_special_tokens));
  return request;
}

}  // namespace kvindex::tokenize
