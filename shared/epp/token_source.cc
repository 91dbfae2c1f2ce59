#include "shared/epp/token_source.h"

#include <simdjson.h>

#include <utility>

#include "shared/tokenize/chat_encoder.h"

namespace kvindex::epp {

TokenOutcome PromptTokenSource::Tokens(const OpenAiRequest& request, std::string_view /*body*/,
                                       std::vector<uint32_t>* out) const {
  if (!request.has_prompt_tokens) return TokenOutcome::kSkip;
  *out = request.prompt_tokens;
  return TokenOutcome::kTokens;
}

TokenOutcome TokenizerTokenSource::Tokens(const OpenAiRequest& request, std::string_view body,
                                          std::vector<uint32_t>* out) const {
  const bool chat = request.kind == OpenAiRequest::Kind::kChat;
  if (!chat && !request.has_prompt_text) return TokenOutcome::kSkip;
  const tokenize::Tokenizer* tokenizer = registry_->Find(request.model);
  if (tokenizer == nullptr) return TokenOutcome::kSkip;
  StatusOr<std::vector<uint32_t>> ids;
  if (chat) {
    // The body's messages, tools, ... rendered and tokenized as vLLM does.
    StatusOr<tokenize::ChatRequest> parsed = tokenize::ParseChatRequest(body);
    if (!parsed.ok()) return TokenOutcome::kFailed;
    ids = tokenize::EncodeChat(*tokenizer, *parsed);
    // Not renderable here (no template, a feature outside the subset,
    // multimodal content): the render endpoint's turn.
    if (absl::IsUnimplemented(ids.status()) || absl::IsFailedPrecondition(ids.status())) {
      return TokenOutcome::kSkip;
    }
  } else {
    ids = tokenizer->Encode(request.prompt_text);
  }
  if (!ids.ok()) return TokenOutcome::kFailed;
  *out = std::move(*ids);
  return TokenOutcome::kTokens;
}

Status ParseRenderAnswer(std::string_view body, std::vector<uint32_t>* out) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body.data(), body.size(), true).get(root) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("render answer: invalid JSON");
  }
  simdjson::dom::array list;
  if (root.get_array().get(list) == simdjson::SUCCESS) {
    if (list.size() == 0) return absl::InvalidArgumentError("render answer: empty list");
    root = list.at(0).value_unsafe();
  }
  simdjson::dom::array ids;
  if (root["token_ids"].get_array().get(ids) != simdjson::SUCCESS &&
      root["prompt_token_ids"].get_array().get(ids) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("render answer: no 'token_ids' array");
  }
  out->clear();
  out->reserve(ids.size());
  for (simdjson::dom::element id : ids) {
    uint64_t value = 0;
    if (id.get_uint64().get(value) != simdjson::SUCCESS || value > UINT32_MAX) {
      return absl::InvalidArgumentError("render answer: a token id is not a u32");
    }
    out->push_back(static_cast<uint32_t>(value));
  }
  return absl::OkStatus();
}

TokenOutcome RenderTokenSource::Tokens(const OpenAiRequest& request, std::string_view body,
                                       std::vector<uint32_t>* out) const {
  http::ClientRequest call;
  call.method = "POST";
  call.url = url_;
  call.path = request.kind == OpenAiRequest::Kind::kChat ? "/v1/chat/completions/render"
                                                         : "/v1/completions/render";
  call.body.assign(body);
  call.timeout = timeout_;
  StatusOr<http::ClientResponse> reply = http::Fetch(call);
  if (!reply.ok() || reply->status != 200) return TokenOutcome::kFailed;
  return ParseRenderAnswer(reply->body, out).ok() ? TokenOutcome::kTokens : TokenOutcome::kFailed;
}

void TokenChain::Add(std::unique_ptr<TokenSource> source) {
  auto entry = std::make_unique<Entry>();
  entry->source = std::move(source);
  entries_.push_back(std::move(entry));
}

TokenOutcome TokenChain::Tokens(const OpenAiRequest& request, std::string_view body,
                                std::vector<uint32_t>* out) const {
  bool failed = false;
  for (const auto& entry : entries_) {
    switch (entry->source->Tokens(request, body, out)) {
      case TokenOutcome::kTokens:
        entry->tokens.fetch_add(1, std::memory_order_relaxed);
        return TokenOutcome::kTokens;
      case TokenOutcome::kSkip:
        entry->skipped.fetch_add(1, std::memory_order_relaxed);
        break;
      case TokenOutcome::kFailed:
        entry->failed.fetch_add(1, std::memory_order_relaxed);
        failed = true;
        break;
    }
  }
  out->clear();
  return failed ? TokenOutcome::kFailed : TokenOutcome::kSkip;
}

bool TokenChain::MayBlock() const {
  for (const auto& entry : entries_) {
    if (entry->source->MayBlock()) return true;
  }
  return false;
}

std::vector<TokenChain::SourceCounts> TokenChain::Counts() const {
  std::vector<SourceCounts> counts;
  for (const auto& entry : entries_) {
    counts.push_back({std::string(entry->source->Name()), entry->tokens.load(),
                      entry->skipped.load(), entry->failed.load()});
  }
  return counts;
}

StatusOr<std::unique_ptr<TokenChain>> BuildTokenChain(const TokenChainOptions& options) {
  auto chain = std::make_unique<TokenChain>();
  chain->Add(std::make_unique<PromptTokenSource>());
  if (options.tokenizers != nullptr && options.tokenizers->size() != 0) {
    chain->Add(std::make_unique<TokenizerTokenSource>(options.tokenizers));
  }
  if (!options.render_url.empty()) {
    KVINDEX_ASSIGN_OR_RETURN(http::Url url, http::ParseUrl(options.render_url));
    chain->Add(std::make_unique<RenderTokenSource>(std::move(url), options.render_timeout));
  }
  return chain;
}

}  // namespace kvindex::epp
