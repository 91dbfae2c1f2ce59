// libFuzzer target for the router's JSON request decoding (shared/query):
// POST /v1/match (tokens, local_hashes, text, messages), the Mooncake /query
// dialect, and the compatibility APIs' bodies, in memory (no socket; the
// HTTP framing is http_request_fuzz's). The first input byte picks the
// path, the rest is the request body (followed by the server's 64 zero
// padding bytes, as the HTTP server hands it over):
//   0, 1  ParseMatchRequest (kMatch, kQuery) against the simdjson-only path
//         (internal::ParseMatchRequestWithSimdjson): the same verdict, and
//         on success the same request; an accepted request written back as
//         canonical JSON parses to the same request (decode-encode round
//         trip). With "messages", the chat parser (tokenize::ParseChatRequest)
//         runs on the body too, as the router does.
//   2     RouterApi::Match over a real index (model "m", block size 4)
//   3..6  CompatApi: /query_tiered_by_hash, /query, /query_by_hash,
//         /register (the same real index)
//   7     FastParseU32Array: when it accepts, nlohmann::json reads the same
//         array of unsigned 32-bit integers; with a small max_count it
//         accepts exactly the arrays that fit.
// Every handler answer must be a known status (never 500), a JSON body, an
// {"error": ...} object when not 200, and (compat APIs) exactly one outcome
// counted per request, the one whose status was answered.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/json_escape.h"
#include "shared/http/server.h"
#include "shared/query/compat_api.h"
#include "shared/query/match_request.h"
#include "shared/tokenize/chat_request.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/router_fixture.h"

namespace {

using kvindex::query::CompatApi;
using kvindex::query::MatchRequest;
using kvindex::query::RequestDialect;

bool Same(const MatchRequest& a, const MatchRequest& b) {
  return a.model == b.model && a.has_tokens == b.has_tokens &&
         a.has_local_hashes == b.has_local_hashes && a.has_text == b.has_text &&
         a.has_messages == b.has_messages && a.tokens == b.tokens && a.text == b.text &&
         a.local_hashes == b.local_hashes && a.has_seq_hashes == b.has_seq_hashes &&
         a.seq_hashes == b.seq_hashes && a.lora_name == b.lora_name &&
         a.cache_salt == b.cache_salt && a.max_blocks == b.max_blocks &&
         a.tenant_id == b.tenant_id && a.instance_id == b.instance_id &&
         a.block_size == b.block_size && a.has_block_size == b.has_block_size;
}

void Str(std::string* out, std::string_view key, std::string_view value) {
  if (out->size() > 1) *out += ',';
  *out += '"';
  *out += key;
  *out += "\":\"";
  kvindex::AppendJsonEscaped(value, out);
  *out += '"';
}

template <typename T>
void Array(std::string* out, std::string_view key, const std::vector<T>& values) {
  if (out->size() > 1) *out += ',';
  *out += '"';
  *out += key;
  *out += "\":[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) *out += ',';
    *out += std::to_string(values[i]);
  }
  *out += ']';
}

// The request as a client would write it (no "messages": their content is
// not kept by the parser).
std::string Canonical(const MatchRequest& r, RequestDialect dialect) {
  std::string out = "{";
  Str(&out, "model", r.model);
  const bool query = dialect == RequestDialect::kQuery;
  if (r.has_tokens) Array(&out, query ? "token_ids" : "tokens", r.tokens);
  if (r.has_local_hashes) Array(&out, "local_hashes", r.local_hashes);
  if (r.has_text) Str(&out, "text", r.text);
  if (!r.lora_name.empty()) Str(&out, "lora_name", r.lora_name);
  if (!r.cache_salt.empty()) Str(&out, "cache_salt", r.cache_salt);
  if (r.max_blocks != 0) out += ",\"max_blocks\":" + std::to_string(r.max_blocks);
  if (!r.tenant_id.empty()) Str(&out, "tenant_id", r.tenant_id);
  if (!r.instance_id.empty()) Str(&out, "instance_id", r.instance_id);
  if (r.has_block_size) out += ",\"block_size\":" + std::to_string(r.block_size);
  out += '}';
  return out;
}

// A body followed by the HTTP server's zero padding.
std::string_view Padded(std::string* storage, std::string_view body) {
  storage->assign(body);
  storage->append(kvindex::http::kBodyPadding, '\0');
  return std::string_view(storage->data(), body.size());
}

void Decode(std::string_view body, RequestDialect dialect) {
  MatchRequest fast, slow;
  const kvindex::Status a = kvindex::query::ParseMatchRequest(body, dialect, &fast);
  const kvindex::Status b =
      kvindex::query::internal::ParseMatchRequestWithSimdjson(body, dialect, &slow);
  FUZZ_CHECK(a.ok() == b.ok(), "the fast scanner and simdjson give the same verdict");
  FUZZ_CHECK(a.ok() || absl::IsInvalidArgument(a), "a refused request is InvalidArgument");
  FUZZ_CHECK(a.ok() || !a.message().empty(), "a refusal says why");
  if (!a.ok()) return;
  FUZZ_CHECK(Same(fast, slow), "the fast scanner and simdjson read the same request");
  FUZZ_CHECK(fast.tokens.size() <= kvindex::query::kMaxTokens, "tokens bounded");
  FUZZ_CHECK(fast.local_hashes.size() <= kvindex::query::kMaxTokens, "hashes bounded");
  if (fast.has_messages) {
    // What the router does with such a body (before the tokenizer); any
    // verdict, no crash.
    (void)kvindex::tokenize::ParseChatRequest(body);
    return;
  }
  std::string storage;
  const std::string canonical = Canonical(fast, dialect);
  MatchRequest again;
  const kvindex::Status c =
      kvindex::query::ParseMatchRequest(Padded(&storage, canonical), dialect, &again);
  FUZZ_CHECK(c.ok(), "an accepted request, written back, is accepted");
  FUZZ_CHECK(Same(fast, again), "an accepted request, written back, reads the same");
}

void FastArray(std::string_view body) {
  std::vector<uint32_t> out;
  // A small max_count too (the scanner fills whole 64-byte blocks at a
  // time near it): it takes the array exactly when it takes it without one
  // and it has at most that many elements.
  const size_t small = body.size() % 67;
  std::vector<uint32_t> limited;
  const bool limited_taken = kvindex::query::FastParseU32Array(body, small, &limited);
  if (!kvindex::query::FastParseU32Array(body, 1000, &out)) {
    FUZZ_CHECK(!limited_taken, "a smaller max_count only declines more");
    return;
  }
  FUZZ_CHECK(out.size() <= 1000, "FastParseU32Array keeps max_count");
  FUZZ_CHECK(limited_taken == (out.size() <= small), "FastParseU32Array declines past max_count");
  FUZZ_CHECK(!limited_taken || limited == out, "max_count does not change the values");
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(json.is_array(), "what FastParseU32Array accepts is a JSON array");
  FUZZ_CHECK(json.size() == out.size(), "FastParseU32Array reads every element");
  for (size_t i = 0; i < out.size(); ++i) {
    FUZZ_CHECK(json[i].is_number_unsigned() && json[i].get<uint64_t>() == out[i],
               "FastParseU32Array reads the element's value");
  }
}

int StatusOf(CompatApi::Outcome outcome) {
  switch (outcome) {
    case CompatApi::Outcome::kOk:
      return 200;
    case CompatApi::Outcome::kUnknownModel:
      return 404;
    case CompatApi::Outcome::kBlockSizeUnknown:
    case CompatApi::Outcome::kRegistrationRefused:
    case CompatApi::Outcome::kRegistrationConflict:
    case CompatApi::Outcome::kTooManyRegistrations:
      return 409;
    case CompatApi::Outcome::kNotRegistered:
      return 404;
    case CompatApi::Outcome::kUnavailable:
      return 503;
    default:
      return 400;
  }
}

void CheckAnswer(const kvindex::http::Response& response) {
  const int s = response.status;
  FUZZ_CHECK(s == 200 || s == 400 || s == 404 || s == 409 || s == 503, "a known status");
  const nlohmann::json json =
      nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!json.is_discarded(), "the answer is JSON");
  if (s != 200) {
    FUZZ_CHECK(json.is_object() && json.contains("error") && json["error"].is_string(),
               "an error answer is {\"error\": \"...\"}");
  }
}

void HandleMatch(std::string_view body) {
  kvindex::http::Request request;
  request.method = "POST";
  request.path = "/v1/match";
  request.body = body;
  kvindex::http::Response response;
  kvindex::fuzz::TheRouter().api->Match(request, response);
  CheckAnswer(response);
}

// Compat API: the counts of every outcome of `api`, before and after.
void HandleCounted(std::string_view body, uint8_t which) {
  kvindex::fuzz::Router& router = kvindex::fuzz::TheRouter();
  const CompatApi& compat = router.api->compat();
  const CompatApi::Api api = which == 3   ? CompatApi::Api::kDynamoTiered
                             : which == 4 ? CompatApi::Api::kMooncakeQuery
                             : which == 5 ? CompatApi::Api::kMooncakeQueryByHash
                                          : CompatApi::Api::kMooncakeRegister;
  constexpr size_t kOutcomes = static_cast<size_t>(CompatApi::Outcome::kCount);
  uint64_t before[kOutcomes];
  for (size_t o = 0; o < kOutcomes; ++o) {
    before[o] = compat.count(api, static_cast<CompatApi::Outcome>(o));
  }
  kvindex::http::Request request;
  request.method = "POST";
  request.body = body;
  kvindex::http::Response response;
  switch (api) {
    case CompatApi::Api::kDynamoTiered:
      compat.QueryTieredByHash(request, response);
      break;
    case CompatApi::Api::kMooncakeQuery:
      compat.MooncakeQuery(request, response);
      break;
    case CompatApi::Api::kMooncakeQueryByHash:
      compat.MooncakeQueryByHash(request, response);
      break;
    default:
      compat.MooncakeRegister(request, response);
      break;
  }
  CheckAnswer(response);
  // Single-threaded here: the only requests counted are ours.
  int counted = 0;
  for (size_t o = 0; o < kOutcomes; ++o) {
    const uint64_t delta = compat.count(api, static_cast<CompatApi::Outcome>(o)) - before[o];
    FUZZ_CHECK(delta <= 1, "one request is counted once");
    if (delta == 1) {
      ++counted;
      FUZZ_CHECK(StatusOf(static_cast<CompatApi::Outcome>(o)) == response.status,
                 "the counted outcome is the answered status");
    }
  }
  FUZZ_CHECK(counted == 1, "every compat request is counted under exactly one outcome");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (size_t{1} << 20)) return 0;
  std::string storage;
  const std::string_view body =
      Padded(&storage, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  switch (data[0] & 7) {
    case 0:
      Decode(body, RequestDialect::kMatch);
      break;
    case 1:
      Decode(body, RequestDialect::kQuery);
      break;
    case 2:
      HandleMatch(body);
      break;
    case 7:
      FastArray(body);
      break;
    default:
      HandleCounted(body, data[0] & 7);
      break;
  }
  return 0;
}
