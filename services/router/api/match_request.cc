// Uses simdjson's on-demand API: for our request shape (one object, one long
// array of integers) it measured ~35% faster than the DOM API on this
// machine class (4.6 us vs 7.0 us for a 1024-token body), even though the
// header-only on-demand kernel is compiled for the build's baseline ISA.
#include "services/router/api/match_request.h"

#include <simdjson.h>

#include <string>

namespace kvindex::router::api {
namespace {

namespace od = simdjson::ondemand;

Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

bool IsStructuralError(simdjson::error_code error) {
  return error == simdjson::TAPE_ERROR || error == simdjson::INCOMPLETE_ARRAY_OR_OBJECT ||
         error == simdjson::UNCLOSED_STRING || error == simdjson::UNESCAPED_CHARS ||
         error == simdjson::UTF8_ERROR || error == simdjson::STRING_ERROR ||
         error == simdjson::DEPTH_ERROR || error == simdjson::EMPTY ||
         error == simdjson::OUT_OF_BOUNDS;
}

Status InvalidJson(simdjson::error_code error) {
  return Invalid(std::string("invalid JSON: ") + simdjson::error_message(error));
}

template <typename T>
Status ReadUnsignedArray(od::value value, std::string_view field, uint64_t max, size_t max_count,
                         std::vector<T>* out) {
  od::array array;
  if (auto error = value.get_array().get(array); error != simdjson::SUCCESS) {
    if (IsStructuralError(error)) return InvalidJson(error);
    return Invalid("field '" + std::string(field) + "' must be an array of unsigned integers");
  }
  out->clear();
  size_t index = 0;
  for (auto element : array) {
    uint64_t number = 0;
    simdjson::error_code error = element.get_uint64().get(number);
    if (error != simdjson::SUCCESS || number > max) {
      if (IsStructuralError(error)) return InvalidJson(error);
      return Invalid("field '" + std::string(field) + "' element " + std::to_string(index) +
                     ": expected an unsigned " + (max == UINT32_MAX ? "32" : "64") +
                     "-bit integer");
    }
    if (index >= max_count) {
      return Invalid("field '" + std::string(field) + "' has more than " +
                     std::to_string(max_count) + " elements");
    }
    out->push_back(static_cast<T>(number));
    ++index;
  }
  return absl::OkStatus();
}

// Reads an optional string (null = absent).
Status ReadOptionalString(od::value value, std::string_view field, std::string* out) {
  od::json_type type;
  if (auto error = value.type().get(type); error != simdjson::SUCCESS) return InvalidJson(error);
  if (type == od::json_type::null) {
    out->clear();
    return absl::OkStatus();
  }
  std::string_view text;
  if (type != od::json_type::string || value.get_string().get(text) != simdjson::SUCCESS) {
    return Invalid("field '" + std::string(field) + "' must be a string or null");
  }
  out->assign(text);
  return absl::OkStatus();
}

}  // namespace

void MatchRequest::Clear() {
  model.clear();
  has_tokens = has_local_hashes = false;
  tokens.clear();
  local_hashes.clear();
  lora_name.clear();
  cache_salt.clear();
  max_blocks = 0;
}

Status ParseMatchRequest(std::string_view body, RequestDialect dialect, MatchRequest* out) {
  out->Clear();
  if (body.empty()) return Invalid("empty request body: expected a JSON object");
  thread_local od::parser parser;
  od::document doc;
  // The caller guarantees SIMDJSON_PADDING readable bytes after the body.
  simdjson::padded_string_view padded(body.data(), body.size(),
                                      body.size() + simdjson::SIMDJSON_PADDING);
  if (auto error = parser.iterate(padded).get(doc); error != simdjson::SUCCESS) {
    return InvalidJson(error);
  }
  od::object object;
  if (auto error = doc.get_object().get(object); error != simdjson::SUCCESS) {
    if (error == simdjson::INCORRECT_TYPE) return Invalid("request body must be a JSON object");
    return InvalidJson(error);
  }
  const std::string_view tokens_key = dialect == RequestDialect::kQuery ? "token_ids" : "tokens";
  bool has_model = false;
  for (auto field : object) {
    std::string_view key;
    if (auto error = field.unescaped_key().get(key); error != simdjson::SUCCESS) {
      return InvalidJson(error);
    }
    od::value value;
    if (auto error = field.value().get(value); error != simdjson::SUCCESS) {
      return InvalidJson(error);
    }
    if (key == "model" || (dialect == RequestDialect::kQuery && key == "model_name")) {
      std::string_view text;
      if (auto error = value.get_string().get(text); error != simdjson::SUCCESS) {
        if (IsStructuralError(error)) return InvalidJson(error);
        return Invalid("field '" + std::string(key) + "' must be a string");
      }
      out->model.assign(text);
      has_model = true;
    } else if (key == tokens_key) {
      KVINDEX_RETURN_IF_ERROR(
          ReadUnsignedArray(value, tokens_key, UINT32_MAX, kMaxTokens, &out->tokens));
      out->has_tokens = true;
    } else if (key == "local_hashes" && dialect == RequestDialect::kMatch) {
      KVINDEX_RETURN_IF_ERROR(
          ReadUnsignedArray(value, "local_hashes", UINT64_MAX, kMaxTokens, &out->local_hashes));
      out->has_local_hashes = true;
    } else if (key == "lora_name") {
      KVINDEX_RETURN_IF_ERROR(ReadOptionalString(value, "lora_name", &out->lora_name));
    } else if (key == "cache_salt") {
      KVINDEX_RETURN_IF_ERROR(ReadOptionalString(value, "cache_salt", &out->cache_salt));
    } else if (key == "max_blocks" && dialect == RequestDialect::kMatch) {
      uint64_t number = 0;
      if (value.get_uint64().get(number) != simdjson::SUCCESS || number > UINT32_MAX) {
        return Invalid("field 'max_blocks' must be an unsigned 32-bit integer");
      }
      out->max_blocks = static_cast<uint32_t>(number);
    }
    // Unknown fields are skipped by the iterator (forward compatibility).
  }
  // Anything after the root object is an error ("{...} x").
  if (doc.current_location().error() == simdjson::SUCCESS) {
    return Invalid("invalid JSON: trailing content after the object");
  }
  const std::string model_key = dialect == RequestDialect::kQuery ? "model_name" : "model";
  if (!has_model || out->model.empty()) {
    return Invalid("missing field '" + model_key + "' (a non-empty string)");
  }
  if (out->has_tokens && out->has_local_hashes) {
    return Invalid("give either 'tokens' or 'local_hashes', not both");
  }
  if (!out->has_tokens && !out->has_local_hashes) {
    return Invalid(dialect == RequestDialect::kQuery
                       ? std::string("missing field 'token_ids' (an array of u32)")
                       : std::string("missing field 'tokens' (an array of u32) or 'local_hashes' "
                                     "(an array of u64)"));
  }
  return absl::OkStatus();
}

}  // namespace kvindex::router::api
