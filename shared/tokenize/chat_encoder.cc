#include "shared/tokenize/chat_encoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "shared/tokenize/tokenizer.h"

namespace kvindex::tokenize {
namespace {

// Render variables transformers or vLLM set themselves: a request's
// chat_template_kwargs naming one of them is not passed through as-is by
// vLLM, so it is refused here rather than guessed.
constexpr const char* kReservedKwargs[] = {"messages",
                                           "conversation",
                                           "tools",
                                           "documents",
                                           "add_generation_prompt",
                                           "continue_final_message",
                                           "chat_template",
                                           "tokenize",
                                           "return_dict"};

}  // namespace

StatusOr<std::unique_ptr<ChatEncoder>> ChatEncoder::FromConfig(const nlohmann::json& config) {
  auto encoder = std::unique_ptr<ChatEncoder>(new ChatEncoder());
  auto load = [](const nlohmann::json& cfg, bool has_tools) -> StatusOr<std::unique_ptr<Variant>> {
    KVINDEX_ASSIGN_OR_RETURN(std::string source, chat_template::SelectTemplate(cfg, has_tools));
    StatusOr<chat_template::ChatTemplate> parsed = chat_template::ChatTemplate::Parse(source);
    if (!parsed.ok()) {
      return Status(parsed.status().code(),
                    absl::StrCat("chat template: ", parsed.status().message()));
    }
    const ContentFormat format =
        parsed->IteratesMessageContent() ? ContentFormat::kOpenAi : ContentFormat::kString;
    return std::make_unique<Variant>(Variant{std::move(*parsed), format});
  };
  KVINDEX_ASSIGN_OR_RETURN(encoder->plain_, load(config, false));
  const bool named = config.contains("chat_template") && config["chat_template"].is_array();
  if (named) {
    KVINDEX_ASSIGN_OR_RETURN(encoder->with_tools_, load(config, true));
  }
  encoder->special_ = nlohmann::json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token", "additional_special_tokens"}) {
    if (const auto it = config.find(key); it != config.end()) encoder->special_[key] = *it;
  }
  return encoder;
}

ContentFormat ChatEncoder::format(bool has_tools) const {
  return (has_tools && with_tools_ ? *with_tools_ : *plain_).format;
}

StatusOr<std::string> ChatEncoder::Render(const ChatRequest& request) const {
  if (request.continue_final_message) {
    return absl::UnimplementedError("continue_final_message (use the render endpoint)");
  }
  if (request.has_request_template) {
    return absl::UnimplementedError("a chat_template in the request (use the render endpoint)");
  }
  for (const char* key : kReservedKwargs) {
    if (request.chat_template_kwargs.contains(key)) {
      return absl::UnimplementedError(absl::StrCat("chat_template_kwargs '", key, "'"));
    }
  }
  const bool has_tools = !request.tools.is_null();
  const Variant& variant = has_tools && with_tools_ ? *with_tools_ : *plain_;
  KVINDEX_ASSIGN_OR_RETURN(nlohmann::ordered_json messages,
                           PrepareMessages(request.messages, variant.format));
  KVINDEX_ASSIGN_OR_RETURN(nlohmann::ordered_json tools, PrepareTools(request.tools));
  nlohmann::ordered_json context = chat_template::ChatContext(
      special_, messages, request.add_generation_prompt, tools, request.chat_template_kwargs);
  context["documents"] = request.documents;
  return variant.tmpl.Render(context);
}

StatusOr<std::vector<uint32_t>> EncodeChat(const Tokenizer& tokenizer, const ChatRequest& request) {
  const ChatEncoder* chat = tokenizer.chat();
  if (chat == nullptr) return tokenizer.chat_status();
  KVINDEX_ASSIGN_OR_RETURN(std::string prompt, chat->Render(request));
  return tokenizer.Encode(prompt, request.add_special_tokens);
}

}  // namespace kvindex::tokenize
