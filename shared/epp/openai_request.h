// OpenAiRequest: what the endpoint picker reads of an OpenAI request body
// (docs/epp.md, "Request parsing"): the model, and the prompt of
// /v1/completions (a string, a token-id array, or a batch of either: the
// first element) or the messages of /v1/chat/completions, and vLLM's
// optional cache_salt. Anything else in the body is ignored.
//
//   OpenAiRequest request;
//   if (Status s = ParseOpenAiRequest(body, ":path value", &request); !s.ok()) -> fail mode
//
// Thread safety: stateless apart from a thread_local parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::epp {

struct OpenAiRequest {
  enum class Kind : uint8_t { kCompletions, kChat };
  Kind kind = Kind::kCompletions;
  std::string model;
  // A token-id prompt (completions): the tokens themselves.
  bool has_prompt_tokens = false;
  std::vector<uint32_t> prompt_tokens;
  // A text prompt (completions).
  bool has_prompt_text = false;
  std::string prompt_text;
  // vLLM's per-request cache salt ("" = none).
  std::string cache_salt;

  void Clear();
};

// `path` is the request's :path header (query string ignored): a path ending
// in /chat/completions parses as chat, anything else as completions (a body
// with "messages" and no "prompt" is chat too). InvalidArgument when the
// body is not a JSON object, has no model string, or neither a usable
// prompt nor messages.
Status ParseOpenAiRequest(std::string_view body, std::string_view path, OpenAiRequest* out);

namespace internal {
// The whole-body scanner alone (the common completions body): true when it
// read the body, with the fields ParseOpenAiRequest gives; false when it
// declines it (the other paths decide then). Tests check it takes the
// usual bodies and agrees with the DOM parse.
bool ScanOpenAiCompletions(std::string_view body, OpenAiRequest* out);
// The DOM parse alone, without the on-demand path in front (tests compare
// the two on the same bodies). Same contract as ParseOpenAiRequest.
Status ParseOpenAiRequestWithDom(std::string_view body, std::string_view path, OpenAiRequest* out);
}  // namespace internal

}  // namespace kvindex::epp
