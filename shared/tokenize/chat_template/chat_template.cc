#include "shared/tokenize/chat_template/chat_template.h"

#include "absl/strings/str_cat.h"
#include "shared/tokenize/chat_template/ast.h"
#include "shared/tokenize/chat_template/parser.h"

namespace kvindex::chat_template {

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  KVINDEX_ASSIGN_OR_RETURN(Body body, ParseTemplate(source));
  ChatTemplate t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                           const RenderLimits& limits) const {
  if (!context.is_object())
    return absl::InvalidArgumentError("chat template context must be a JSON object");
  const Value ctx = Value::FromJson(context);
  return RenderTemplate(*body_, ctx.dict(), limits);
}

StatusOr<std::string> SelectTemplate(const nlohmann::json& config, bool has_tools) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return absl::FailedPreconditionError("tokenizer_config.json has no chat_template");
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    return absl::InvalidArgumentError(
        "chat_template must be a string or a list of {name, template}");
  const nlohmann::json* chosen = nullptr;
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(
          "chat_template list entries must be {name, template} strings");
    }
    if (entry["name"] == "tool_use" && has_tools) return entry["template"].get<std::string>();
    if (entry["name"] == "default") chosen = &entry;
  }
  if (chosen == nullptr) {
    return absl::FailedPreconditionError(
        "tokenizer_config.json has named chat templates but no 'default'");
  }
  return (*chosen)["template"].get<std::string>();
}

nlohmann::ordered_json ChatContext(const nlohmann::json& config,
                                   const nlohmann::ordered_json& messages,
                                   bool add_generation_prompt, const nlohmann::ordered_json& tools,
                                   const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  // transformers' special_tokens_map: the set ones, as strings.
  static constexpr const char* kSpecial[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};
  for (const char* key : kSpecial) {
    const auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string() && !it->get<std::string>().empty()) {
      ctx[key] = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      ctx[key] = (*it)["content"].get<std::string>();
    }
  }
  if (const auto it = config.find("additional_special_tokens");
      it != config.end() && it->is_array() && !it->empty()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : *it) {
      if (t.is_string()) list.push_back(t.get<std::string>());
      if (t.is_object() && t.contains("content") && t["content"].is_string()) {
        list.push_back(t["content"].get<std::string>());
      }
    }
    ctx["additional_special_tokens"] = list;
  }
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
  }
  return ctx;
}

StatusOr<std::string> RenderChat(const nlohmann::json& tokenizer_config,
                                 const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& tools,
                                 const nlohmann::ordered_json& extra) {
  const bool has_tools = !tools.is_null();
  KVINDEX_ASSIGN_OR_RETURN(std::string source, SelectTemplate(tokenizer_config, has_tools));
  KVINDEX_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Parse(source));
  return tmpl.Render(ChatContext(tokenizer_config, messages, add_generation_prompt, tools, extra));
}

}  // namespace kvindex::chat_template
