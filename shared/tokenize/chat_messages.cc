#include "shared/tokenize/chat_messages.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvindex::tokenize {
namespace {

using Json = nlohmann::ordered_json;

Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// One content part: *skip when vLLM drops it; otherwise *out is a string
// ("string" format) or a part object ("openai").
Status ParsePart(const Json& part, size_t index, ContentFormat format, Json* out, bool* skip) {
  *skip = false;
  const bool wrap = format == ContentFormat::kOpenAi;
  auto text_part = [&](const Json& text) -> Status {
    if (!text.is_string()) {
      return Invalid(absl::StrCat("content part ", index, ": text must be a string"));
    }
    *out = wrap ? Json{{"type", "text"}, {"text", text}} : text;
    return absl::OkStatus();
  };
  if (part.is_string()) return text_part(part);
  if (!part.is_object()) {
    return Invalid(absl::StrCat("content part ", index, " must be a string or an object"));
  }
  static constexpr const char* kMedia[] = {
      "image_url", "image_pil",   "image_embeds", "audio_embeds", "prompt_embeds",
      "audio_url", "input_audio", "video_url",    "input_image",  "vision_chunk"};
  const auto type_it = part.find("type");
  const auto uuid_it = part.find("uuid");
  const bool has_uuid = uuid_it != part.end() && !uuid_it->is_null();
  const bool no_type = type_it == part.end() || type_it->is_null();
  auto get = [&](const char* key) { return part.contains(key) ? part.at(key) : Json(nullptr); };
  std::string type;
  if (!no_type && !has_uuid && type_it->is_string()) type = type_it->get<std::string>();
  if (type.empty() && (no_type || has_uuid)) {
    for (const char* key : kMedia) {
      if (part.contains(key)) {
        return absl::UnimplementedError(
            absl::StrCat("multimodal content part '", key, "' (use the render endpoint)"));
      }
    }
    if (!part.contains("tool_reference")) {
      return Invalid(absl::StrCat("content part ", index, ": missing 'type' field"));
    }
    type = "tool_reference";
  }
  if (type.empty()) {
    if (!type_it->is_string()) return Invalid(absl::StrCat("content part ", index, ": bad 'type'"));
    type = type_it->get<std::string>();
  }
  if (type == "text" || type == "input_text" || type == "output_text") {
    const Json text = get("text");
    if (text.is_null() && type == "text") {
      *skip = true;
      return absl::OkStatus();
    }
    return text_part(text);
  }
  if (type == "refusal" || type == "thinking") {
    const Json text = get(type == "refusal" ? "refusal" : "thinking");
    if (text.is_null() && type == "refusal") {
      *skip = true;
      return absl::OkStatus();
    }
    return text_part(text);
  }
  if (type == "tool_reference") {
    const Json name = get("name");
    if (!name.is_string()) {
      return Invalid(
          absl::StrCat("content part ", index, ": tool_reference name must be a string"));
    }
    *out = wrap ? Json{{"type", "tool_reference"}, {"name", name}} : name;
    return absl::OkStatus();
  }
  for (const char* key : kMedia) {
    if (type == key) {
      return absl::UnimplementedError(
          absl::StrCat("multimodal content part '", type, "' (use the render endpoint)"));
    }
  }
  return Invalid(absl::StrCat("content part ", index, ": unsupported type '", type, "'"));
}

StatusOr<Json> PrepareContent(const Json& content, ContentFormat format) {
  std::vector<Json> parts;
  if (content.is_string()) {
    parts.push_back(Json{{"type", "text"}, {"text", content}});
  } else if (content.is_array()) {
    parts.assign(content.begin(), content.end());
  } else if (!content.is_null()) {
    return Invalid("field 'content' must be a string, an array of parts or null");
  }
  Json list = Json::array();
  std::string joined;
  bool first = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    Json parsed;
    bool skip = false;
    KVINDEX_RETURN_IF_ERROR(ParsePart(parts[i], i, format, &parsed, &skip));
    if (skip) continue;
    if (format == ContentFormat::kOpenAi) {
      list.push_back(std::move(parsed));
      continue;
    }
    const std::string& text = parsed.get_ref<const std::string&>();
    if (text.empty()) continue;  // Python drops falsy parts
    if (!first) joined += '\n';
    joined += text;
    first = false;
  }
  if (format == ContentFormat::kOpenAi) return list;
  return Json(std::move(joined));
}

// _postprocess_messages: arguments parsed from JSON strings.
Status PrepareToolCalls(Json* message) {
  auto it = message->find("tool_calls");
  if (it == message->end() || !it->is_array()) return absl::OkStatus();
  if (it->empty()) {
    message->erase("tool_calls");
    return absl::OkStatus();
  }
  for (Json& call : *it) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
      return Invalid("each tool call needs a 'function' object");
    }
    Json& function = call["function"];
    const auto args = function.find("arguments");
    if (args != function.end() && args->is_string()) {
      const std::string& text = args->get_ref<const std::string&>();
      Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        // Python's json.loads also reads NaN and Infinity, which nlohmann
        // does not: refuse rather than guess.
        if (text.find("NaN") != std::string::npos || text.find("Infinity") != std::string::npos) {
          return absl::UnimplementedError("tool call arguments with NaN or Infinity");
        }
        parsed = Json::object();
      }
      *args = std::move(parsed);
    } else if (args == function.end()) {
      function["arguments"] = Json::object();
    } else if (!args->is_object() && !args->is_array()) {
      *args = Json::object();
    }
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<nlohmann::ordered_json> PrepareMessages(const nlohmann::ordered_json& messages,
                                                 ContentFormat format) {
  if (!messages.is_array()) return Invalid("field 'messages' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& message = messages[i];
    if (!message.is_object()) return Invalid(absl::StrCat("message ", i, " must be an object"));
    const auto role_it = message.find("role");
    if (role_it == message.end() || !role_it->is_string()) {
      return Invalid(absl::StrCat("message ", i, ": 'role' must be a string"));
    }
    const std::string role = role_it->get<std::string>();
    const Json content = message.contains("content") ? message.at("content") : Json(nullptr);
    StatusOr<Json> prepared = PrepareContent(content, format);
    if (!prepared.ok()) {
      return Status(prepared.status().code(),
                    absl::StrCat("message ", i, ": ", prepared.status().message()));
    }
    Json result = Json::object();
    result["role"] = role;
    result["content"] = std::move(*prepared);
    if (role == "assistant") {
      if (const auto it = message.find("tool_calls"); it != message.end() && !it->is_null()) {
        if (!it->is_array())
          return Invalid(absl::StrCat("message ", i, ": 'tool_calls' must be an array"));
        result["tool_calls"] = *it;
      }
      if (const auto it = message.find("reasoning"); it != message.end() && !it->is_null()) {
        result["reasoning"] = *it;
        result["reasoning_content"] = *it;
      }
    } else if (role == "tool") {
      if (const auto it = message.find("tool_call_id"); it != message.end()) {
        result["tool_call_id"] = *it;
      }
      Json& c = result["content"];
      if (c.is_array()) {
        bool only_text = true;
        for (const Json& item : c) {
          if (item.is_object() && item.value("type", Json(nullptr)) != Json("text"))
            only_text = false;
        }
        if (only_text) {
          std::string joined;
          bool first = true;
          for (const Json& item : c) {
            if (!item.is_object()) continue;
            if (!first) joined += '\n';
            const auto text = item.find("text");
            if (text != item.end() && text->is_string()) joined += text->get<std::string>();
            first = false;
          }
          c = joined;
        }
      }
    }
    if (const auto it = message.find("name"); it != message.end() && it->is_string()) {
      result["name"] = *it;
    }
    if (const auto it = message.find("task"); it != message.end() && it->is_string()) {
      result["task"] = *it;
    }
    if (role == "developer") {
      result["tools"] = message.contains("tools") ? message.at("tools") : Json(nullptr);
    }
    if (role == "assistant") {
      Status s = PrepareToolCalls(&result);
      if (!s.ok()) return Status(s.code(), absl::StrCat("message ", i, ": ", s.message()));
    }
    out.push_back(std::move(result));
  }
  return out;
}

StatusOr<nlohmann::ordered_json> PrepareTools(const nlohmann::ordered_json& tools) {
  if (tools.is_null()) return tools;
  if (!tools.is_array()) return Invalid("field 'tools' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    if (!tool.is_object()) return Invalid(absl::StrCat("tool ", i, " must be an object"));
    if (const auto it = tool.find("type"); it != tool.end() && *it != Json("function")) {
      return Invalid(absl::StrCat("tool ", i, ": 'type' must be \"function\""));
    }
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) {
      return Invalid(absl::StrCat("tool ", i, ": 'function' must be an object"));
    }
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) {
      return Invalid(absl::StrCat("tool ", i, ": 'function.name' must be a string"));
    }
    Json function = Json::object();
    function["name"] = *name;
    function["description"] = fn->contains("description") ? fn->at("description") : Json(nullptr);
    function["parameters"] = fn->contains("parameters") ? fn->at("parameters") : Json(nullptr);
    if (!function["description"].is_null() && !function["description"].is_string()) {
      return Invalid(absl::StrCat("tool ", i, ": 'function.description' must be a string"));
    }
    if (!function["parameters"].is_null() && !function["parameters"].is_object()) {
      return Invalid(absl::StrCat("tool ", i, ": 'function.parameters' must be an object"));
    }
    for (const auto& [key, value] : fn->items()) {
      if (key != "name" && key != "description" && key != "parameters") function[key] = value;
    }
    Json result = Json::object();
    result["type"] = "function";
    result["function"] = std::move(function);
    for (const auto& [key, value] : tool.items()) {
      if (key != "type" && key != "function") result[key] = value;
    }
    out.push_back(std::move(result));
  }
  return out;
}

}  // namespace kvindex::tokenize
