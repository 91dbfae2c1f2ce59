#include "shared/epp/openai_request.h"

#include <simdjson.h>

#include <cstdint>
#include <string>

#include "shared/query/match_request.h"

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

namespace od = simdjson::ondemand;

// Whitespace after a value, before the next ',' or '}' (RFC 8259).
bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// No token count of its own: the body size bounds the prompt (the DOM parse
// takes any count too). A count the scanner refuses goes to the DOM parse.
constexpr size_t kMaxPromptTokens = SIZE_MAX;

// Reads a value to its end, every scalar parsed and every string unescaped,
// so that the on-demand path accepts only what the DOM parse accepts.
bool Validate(od::value value) {
  od::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  switch (type) {
    case od::json_type::object: {
      od::object object;
      if (value.get_object().get(object) != simdjson::SUCCESS) return false;
      for (auto field : object) {
        std::string_view key;
        od::value inner;
        if (field.unescaped_key().get(key) != simdjson::SUCCESS ||
            field.value().get(inner) != simdjson::SUCCESS || !Validate(inner)) {
          return false;
        }
      }
      return true;
    }
    case od::json_type::array: {
      od::array array;
      if (value.get_array().get(array) != simdjson::SUCCESS) return false;
      for (auto element : array) {
        od::value inner;
        if (element.get(inner) != simdjson::SUCCESS || !Validate(inner)) return false;
      }
      return true;
    }
    case od::json_type::string: {
      std::string_view text;
      return value.get_string().get(text) == simdjson::SUCCESS;
    }
    case od::json_type::number: {
      od::number number;
      return value.get_number().get(number) == simdjson::SUCCESS;
    }
    case od::json_type::boolean: {
      bool b = false;
      return value.get_bool().get(b) == simdjson::SUCCESS;
    }
    case od::json_type::null: {
      bool null = false;
      return value.is_null().get(null) == simdjson::SUCCESS && null;
    }
  }
  return false;
}

// The common request, read once on demand (no DOM tape: each token id is
// parsed once, straight into the output): a completions body whose prompt
// is a non-empty array of token ids or a string, no "messages". Every other
// value of the body is validated (Validate), the first of duplicate keys
// counts, as in the DOM parse. Returns false for anything else, valid or
// not (a batch, chat, errors): the DOM parse then decides, with its
// messages.
bool ParseCommonCompletions(std::string_view body, OpenAiRequest* out) {
  thread_local od::parser parser;
  thread_local std::string padded;
  padded.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  padded.assign(body);
  od::document doc;
  if (parser.iterate(simdjson::padded_string_view(padded.data(), padded.size(), padded.capacity()))
          .get(doc) != simdjson::SUCCESS) {
    return false;
  }
  od::object object;
  if (doc.get_object().get(object) != simdjson::SUCCESS) return false;
  bool model_seen = false, salt_seen = false, prompt_seen = false;
  for (auto field : object) {
    std::string_view key;
    od::value value;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS ||
        field.value().get(value) != simdjson::SUCCESS) {
      return false;
    }
    if (key == "messages") return false;
    if (key == "model" && !model_seen) {
      model_seen = true;
      std::string_view model;
      if (value.get_string().get(model) != simdjson::SUCCESS || model.empty()) return false;
      out->model.assign(model);
    } else if (key == "cache_salt" && !salt_seen) {
      salt_seen = true;
      od::json_type type;
      if (value.type().get(type) != simdjson::SUCCESS) return false;
      if (type == od::json_type::string) {
        std::string_view salt;
        if (value.get_string().get(salt) != simdjson::SUCCESS) return false;
        out->cache_salt.assign(salt);
      } else if (!Validate(value)) {
        return false;
      }
    } else if (key == "prompt" && !prompt_seen) {
      prompt_seen = true;
      od::json_type type;
      if (value.type().get(type) != simdjson::SUCCESS) return false;
      if (type == od::json_type::string) {
        std::string_view text;
        if (value.get_string().get(text) != simdjson::SUCCESS) return false;
        out->prompt_text.assign(text);
        out->has_prompt_text = true;
      } else if (type == od::json_type::array) {
        // The array's text (skipped over, not parsed, by simdjson), decoded
        // by /v1/match's scanner of token arrays; anything it declines
        // (signs, fractions, exponents, nesting, ...) goes to the DOM parse.
        od::array array;
        std::string_view json;
        if (value.get_array().get(array) != simdjson::SUCCESS ||
            array.raw_json().get(json) != simdjson::SUCCESS) {
          return false;
        }
        while (!json.empty() && IsJsonSpace(json.back())) json.remove_suffix(1);
        // The padding after the body keeps the scanner's reads in bounds.
        if (!query::FastParseU32Array(json, kMaxPromptTokens, &out->prompt_tokens) ||
            out->prompt_tokens.empty()) {
          return false;
        }
        out->has_prompt_tokens = true;
      } else {
        return false;
      }
    } else if (!Validate(value)) {
      return false;
    }
  }
  // Nothing after the object (the DOM parse refuses trailing content).
  if (doc.current_location().error() != simdjson::OUT_OF_BOUNDS) return false;
  if (!model_seen || !prompt_seen) return false;
  out->kind = OpenAiRequest::Kind::kCompletions;
  return true;
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

namespace {

bool IsChatPath(std::string_view path) {
  if (size_t q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  return path.ends_with("/chat/completions");
}

// Any body, with every error's message.
Status ParseWithDom(std::string_view body, bool chat_path, OpenAiRequest* out) {
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

}  // namespace

Status ParseOpenAiRequest(std::string_view body, std::string_view path, OpenAiRequest* out) {
  out->Clear();
  const bool chat_path = IsChatPath(path);
  if (!chat_path) {
    if (ParseCommonCompletions(body, out)) return absl::OkStatus();
    out->Clear();
  }
  return ParseWithDom(body, chat_path, out);
}

Status internal::ParseOpenAiRequestWithDom(std::string_view body, std::string_view path,
                                           OpenAiRequest* out) {
  out->Clear();
  return ParseWithDom(body, IsChatPath(path), out);
}

}  // namespace kvindex::epp
