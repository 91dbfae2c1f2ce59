// Parsing of POST /v1/match and POST /query bodies, in place (the HTTP server
// leaves kBodyPadding zero bytes after the body): a strict scanner for the
// usual shape (a flat object with a model and a token array), simdjson
// on-demand for anything else and for every error message.
//
//   MatchRequest request;
//   if (Status s = ParseMatchRequest(body, RequestDialect::kMatch, &request); !s.ok())
//     -> 400 with s.message()
//
// Every error message names the field and the problem ("field 'tokens'
// element 3: expected an unsigned 32-bit integer"), so a client can fix its
// request from the 400 alone. Unknown fields are ignored (forward
// compatibility); null counts as absent for optional fields.
//
// Thread safety: stateless apart from a thread_local parser per thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::query {

// Largest token list accepted (docs/api.md, "Limits"): beyond -> 400.
inline constexpr size_t kMaxTokens = 1'000'000;

struct MatchRequest {
  std::string model;
  bool has_tokens = false;
  bool has_local_hashes = false;
  bool has_text = false;  // /v1/match "text": the model's tokenizer makes `tokens`
  // /v1/match "messages" (an array): the caller renders the body's chat
  // request (shared/tokenize/chat_request.h) and tokenizes it into `tokens`.
  bool has_messages = false;
  std::vector<uint32_t> tokens;
  std::string text;
  std::vector<uint64_t> local_hashes;
  // Canonical sequence hashes (compatibility APIs: Mooncake /query_by_hash).
  bool has_seq_hashes = false;
  std::vector<uint64_t> seq_hashes;
  std::string lora_name;
  std::string cache_salt;
  uint32_t max_blocks = 0;  // optional cap, 0 = all
  // kQuery only (the Mooncake indexer API's scope): tenant and instance
  // ("" = absent or null), the client's block size when given.
  std::string tenant_id;
  std::string instance_id;
  uint32_t block_size = 0;
  bool has_block_size = false;

  void Clear();
};

enum class RequestDialect : uint8_t {
  // /v1/match: {"model", "tokens" | "local_hashes" | "text" | "messages", "lora_name",
  // "cache_salt", "max_blocks"}
  kMatch,
  // /query (Mooncake indexer API, RFC #1403; docs/compat.md): {"model" (or
  // "model_name"), "token_ids", "lora_name", "cache_salt", "tenant_id",
  // "instance_id", "block_size"}; a non-null "lora_id" is refused.
  kQuery,
};

// `body` must be followed by at least 64 readable bytes (simdjson padding).
// InvalidArgument with a message naming the problem.
Status ParseMatchRequest(std::string_view body, RequestDialect dialect, MatchRequest* out);

// The fast scanner of token arrays alone: `json` is one JSON array ('['
// to ']') followed by at least 64 readable bytes (the body padding). True
// when it parsed the whole array into *out; false when it declines (signs,
// fractions, more than max_count elements, ...): parse it another way then.
bool FastParseU32Array(std::string_view json, size_t max_count, std::vector<uint32_t>* out);

namespace internal {
// The simdjson path alone, without the fast scanner in front (tests compare
// the two on the same bodies). Same contract as ParseMatchRequest.
Status ParseMatchRequestWithSimdjson(std::string_view body, RequestDialect dialect,
                                     MatchRequest* out);
}  // namespace internal

}  // namespace kvindex::query
