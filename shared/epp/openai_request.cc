#include "shared/epp/openai_request.h"

#include <simdjson.h>

#include <cstdint>
#include <cstring>
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

// The body in storage with simdjson's padding after it (which also keeps
// the token scanner's reads in bounds): one copy per thread, reused.
const std::string& Padded(std::string_view body) {
  thread_local std::string padded;
  padded.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  padded.assign(body);
  return padded;
}

// ---- The whole-body scanner ------------------------------------------------
// The usual body from a gateway, a flat object of a model, a token-id (or
// plain text) prompt and a few scalar options, is read in one pass like
// /v1/match's FastParse: no simdjson stage 1, no on-demand walk, the token
// array decoded by /v1/match's scanner straight from the body. It declines
// (false) whatever it cannot decide exactly as the DOM parse would:
// "messages", a nested value other than the prompt's array, a string with
// an escape, a control or non-ASCII byte, a number outside a plain range
// (so that no number the DOM parse would refuse for its size slips
// through), a repeated model, prompt or cache_salt, any stray byte. The
// on-demand path and the DOM parse then decide.

const char* SkipSpace(const char* p, const char* end) {
  while (p < end && IsJsonSpace(*p)) ++p;
  return p;
}

// A string at `p` (its opening quote) without escapes, control or non-ASCII
// bytes; returns the position after its closing quote, or null.
const char* PlainString(const char* p, const char* end, std::string_view* out) {
  if (p >= end || *p != '"') return nullptr;
  const char* const start = ++p;
  for (; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"') {
      *out = std::string_view(start, static_cast<size_t>(p - start));
      return p + 1;
    }
    if (c == '\\' || c < 0x20 || c >= 0x80) return nullptr;
  }
  return nullptr;
}

// Up to `max` digits at `p` (at least one); returns the position after them.
const char* Digits(const char* p, const char* end, int max) {
  const char* const start = p;
  while (p < end && *p >= '0' && *p <= '9') ++p;
  return p == start || p - start > max ? nullptr : p;
}

// A JSON number whose value no parser refuses: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?
// with at most 15 digits before and after the point and 2 in the exponent
// (a double, neither overflowing nor underflowing, or an exact integer).
const char* PlainNumber(const char* p, const char* end) {
  if (p < end && *p == '-') ++p;
  if (p < end && *p == '0') {
    ++p;
  } else if ((p = Digits(p, end, 15)) == nullptr) {
    return nullptr;
  }
  if (p < end && *p == '.' && (p = Digits(p + 1, end, 15)) == nullptr) return nullptr;
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    if (p < end && (*p == '+' || *p == '-')) ++p;
    if ((p = Digits(p, end, 2)) == nullptr) return nullptr;
  }
  return p;
}

// A scalar: a plain string or number, true, false or null.
const char* PlainScalar(const char* p, const char* end) {
  if (p >= end) return nullptr;
  std::string_view ignored;
  switch (*p) {
    case '"':
      return PlainString(p, end, &ignored);
    case 't':
      return end - p >= 4 && std::string_view(p, 4) == "true" ? p + 4 : nullptr;
    case 'f':
      return end - p >= 5 && std::string_view(p, 5) == "false" ? p + 5 : nullptr;
    case 'n':
      return end - p >= 4 && std::string_view(p, 4) == "null" ? p + 4 : nullptr;
    default:
      return PlainNumber(p, end);
  }
}

// `body` is followed by simdjson's padding (Padded).
bool ScanCompletions(std::string_view body, OpenAiRequest* out) {
  const char* p = body.data();
  const char* const end = p + body.size();
  p = SkipSpace(p, end);
  if (p >= end || *p != '{') return false;
  p = SkipSpace(p + 1, end);
  bool model_seen = false, salt_seen = false, prompt_seen = false;
  while (p < end) {
    std::string_view key;
    if ((p = PlainString(p, end, &key)) == nullptr) return false;
    p = SkipSpace(p, end);
    if (p >= end || *p != ':') return false;
    p = SkipSpace(p + 1, end);
    if (key == "model") {
      std::string_view model;
      if (model_seen || (p = PlainString(p, end, &model)) == nullptr || model.empty()) {
        return false;
      }
      model_seen = true;
      out->model.assign(model);
    } else if (key == "prompt") {
      if (prompt_seen || p >= end) return false;
      prompt_seen = true;
      if (*p == '"') {
        std::string_view text;
        if ((p = PlainString(p, end, &text)) == nullptr) return false;
        out->prompt_text.assign(text);
        out->has_prompt_text = true;
      } else {
        // The first ']' closes a flat array; in a nested one the scanner
        // meets a '[' and declines.
        const void* close = p < end && *p == '[' ? std::memchr(p, ']', size_t(end - p)) : nullptr;
        if (close == nullptr) return false;
        const char* const after = static_cast<const char*>(close) + 1;
        if (!query::FastParseU32Array(std::string_view(p, size_t(after - p)), kMaxPromptTokens,
                                      &out->prompt_tokens) ||
            out->prompt_tokens.empty()) {
          return false;
        }
        out->has_prompt_tokens = true;
        p = after;
      }
    } else if (key == "cache_salt") {
      if (salt_seen || p >= end) return false;
      salt_seen = true;
      std::string_view salt;
      if (*p == '"') {
        if ((p = PlainString(p, end, &salt)) == nullptr) return false;
        out->cache_salt.assign(salt);
      } else if ((p = PlainScalar(p, end)) == nullptr) {
        return false;
      }
    } else if (key == "messages" || (p = PlainScalar(p, end)) == nullptr) {
      return false;
    }
    p = SkipSpace(p, end);
    if (p >= end) return false;
    if (*p == '}') {
      if (SkipSpace(p + 1, end) != end || !model_seen || !prompt_seen) return false;
      out->kind = OpenAiRequest::Kind::kCompletions;
      return true;
    }
    if (*p != ',') return false;
    p = SkipSpace(p + 1, end);
  }
  return false;
}

// ---- The on-demand path ----------------------------------------------------
// The common request, read once on demand (no DOM tape: each token id is
// parsed once, straight into the output): a completions body whose prompt
// is a non-empty array of token ids or a string, no "messages". Every other
// value of the body is validated (Validate), the first of duplicate keys
// counts, as in the DOM parse. Returns false for anything else, valid or
// not (a batch, chat, errors): the DOM parse then decides, with its
// messages.
bool ParseCommonCompletions(const std::string& padded, OpenAiRequest* out) {
  thread_local od::parser parser;
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
    const std::string& padded = Padded(body);
    if (ScanCompletions(padded, out)) return absl::OkStatus();
    out->Clear();
    if (ParseCommonCompletions(padded, out)) return absl::OkStatus();
    out->Clear();
  }
  return ParseWithDom(body, chat_path, out);
}

bool internal::ScanOpenAiCompletions(std::string_view body, OpenAiRequest* out) {
  out->Clear();
  return ScanCompletions(Padded(body), out);
}

Status internal::ParseOpenAiRequestWithDom(std::string_view body, std::string_view path,
                                           OpenAiRequest* out) {
  out->Clear();
  return ParseWithDom(body, IsChatPath(path), out);
}

}  // namespace kvindex::epp
