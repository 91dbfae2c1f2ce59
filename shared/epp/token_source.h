// Token sources of the endpoint picker: an ordered chain asked in turn for
// a request's token ids (docs/epp.md, "Tokens"). The first source that has
// them wins; a source that does not apply skips; a source that fails is
// counted and the next is asked. No tokens at all: the pick is load-only.
//
// The chain the router builds (BuildTokenChain): the token-id prompt, then
// the in-process tokenizer of the request's model (--tokenizer MODEL=DIR;
// text prompts), then --render-url.
//
// Thread safety: sources are immutable after construction; Tokens() is
// called concurrently from the gRPC threads; counters are atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/epp/openai_request.h"
#include "shared/http/client.h"
#include "shared/tokenize/registry.h"

namespace kvindex::epp {

enum class TokenOutcome : uint8_t {
  kTokens,  // *out holds the request's token ids
  kSkip,    // this source does not apply to the request
  kFailed,  // it applies but failed (timeout, bad answer): counted
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // "prompt", "render", ...: the `source` label of the metrics.
  virtual std::string_view Name() const = 0;
  // `body` is the request body as received.
  virtual TokenOutcome Tokens(const OpenAiRequest& request, std::string_view body,
                              std::vector<uint32_t>* out) const = 0;
  // It may wait on I/O (an HTTP call): not to be run on gRPC's callback threads.
  virtual bool MayBlock() const { return false; }
};

// The token ids of a token-id prompt (/v1/completions).
class PromptTokenSource final : public TokenSource {
 public:
  std::string_view Name() const override { return "prompt"; }
  TokenOutcome Tokens(const OpenAiRequest& request, std::string_view body,
                      std::vector<uint32_t>* out) const override;
};

// A text prompt (/v1/completions) encoded by the in-process tokenizer of the
// request's model, with its special tokens as vLLM adds them; a chat request
// (/v1/chat/completions) rendered with the model's chat template and
// tokenized as vLLM does (shared/tokenize/chat_encoder.h). A model with no
// tokenizer skips; so does a chat this process cannot render (no template,
// a template or request feature outside the subset, multimodal content):
// the render endpoint gets it. Text the tokenizer refuses (invalid UTF-8)
// and chats the template refuses fail.
class TokenizerTokenSource final : public TokenSource {
 public:
  explicit TokenizerTokenSource(const tokenize::TokenizerRegistry* registry)
      : registry_(registry) {}
  std::string_view Name() const override { return "tokenizer"; }
  TokenOutcome Tokens(const OpenAiRequest& request, std::string_view body,
                      std::vector<uint32_t>* out) const override;

 private:
  const tokenize::TokenizerRegistry* const registry_;
};

// A vLLM-compatible render endpoint: POST <url>/v1/completions/render or
// /v1/chat/completions/render with the request body, answered with
// {"token_ids": [...]} (or a list of such objects: the first), within
// `timeout`.
class RenderTokenSource final : public TokenSource {
 public:
  RenderTokenSource(http::Url url, std::chrono::milliseconds timeout)
      : url_(std::move(url)), timeout_(timeout) {}
  std::string_view Name() const override { return "render"; }
  TokenOutcome Tokens(const OpenAiRequest& request, std::string_view body,
                      std::vector<uint32_t>* out) const override;
  bool MayBlock() const override { return true; }

 private:
  const http::Url url_;
  const std::chrono::milliseconds timeout_;
};

// Parses a render answer's token ids (public for tests).
Status ParseRenderAnswer(std::string_view body, std::vector<uint32_t>* out);

class TokenChain {
 public:
  void Add(std::unique_ptr<TokenSource> source);
  // The first kTokens answer; kFailed when a source failed and none had
  // tokens; kSkip when none applied.
  TokenOutcome Tokens(const OpenAiRequest& request, std::string_view body,
                      std::vector<uint32_t>* out) const;
  // One of its sources may wait on I/O.
  bool MayBlock() const;

  struct SourceCounts {
    std::string name;
    uint64_t tokens = 0, skipped = 0, failed = 0;
  };
  std::vector<SourceCounts> Counts() const;

 private:
  struct Entry {
    std::unique_ptr<TokenSource> source;
    mutable std::atomic<uint64_t> tokens{0}, skipped{0}, failed{0};
  };
  std::vector<std::unique_ptr<Entry>> entries_;
};

struct TokenChainOptions {
  // --render-url: "" = no render source.
  std::string render_url;
  // --render-timeout. Default: 50 ms.
  std::chrono::milliseconds render_timeout{50};
  // --tokenizer MODEL=DIR; must outlive the chain. Null = none.
  const tokenize::TokenizerRegistry* tokenizers = nullptr;
};

// The router's chain: prompt tokens, [in-process tokenizer], render.
StatusOr<std::unique_ptr<TokenChain>> BuildTokenChain(const TokenChainOptions& options);

}  // namespace kvindex::epp
