#include "shared/epp/openai_request.h"

#include <gtest/gtest.h>

#include "shared/epp/token_source.h"

namespace kvindex::epp {
namespace {

TEST(OpenAiRequestTest, CompletionsPromptShapes) {
  OpenAiRequest r;
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":[1,2,3]})", "/v1/completions", &r).ok());
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.has_prompt_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{1, 2, 3}));
  ASSERT_TRUE(
      ParseOpenAiRequest(R"({"model":"m","prompt":[[4,5],[6]]})", "/v1/completions", &r).ok());
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{4, 5}));  // a batch: the first
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"hi","cache_salt":"s"})",
                                 "/v1/completions?x=1", &r)
                  .ok());
  EXPECT_TRUE(r.has_prompt_text);
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.cache_salt, "s");
  ASSERT_TRUE(
      ParseOpenAiRequest(R"({"model":"m","prompt":["a","b"]})", "/v1/completions", &r).ok());
  EXPECT_EQ(r.prompt_text, "a");
}

TEST(OpenAiRequestTest, ChatAndErrors) {
  OpenAiRequest r;
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","messages":[{"role":"user","content":"x"}]})",
                                 "/v1/chat/completions", &r)
                  .ok());
  EXPECT_EQ(r.kind, OpenAiRequest::Kind::kChat);
  EXPECT_FALSE(r.has_prompt_tokens);
  for (const char* bad :
       {"not json", "[]", R"({"prompt":[1]})", R"({"model":"m"})", R"({"model":"m","prompt":[-1]})",
        R"({"model":"m","prompt":[]})", R"({"model":"m","prompt":[4294967296]})"}) {
    EXPECT_FALSE(ParseOpenAiRequest(bad, "/v1/completions", &r).ok()) << bad;
  }
  EXPECT_FALSE(
      ParseOpenAiRequest(R"({"model":"m","prompt":[1]})", "/v1/chat/completions", &r).ok());
}

TEST(TokenChainTest, PromptFirstRenderFailsOver) {
  // A render URL nobody listens on: the render source fails, counted; a
  // token prompt never reaches it.
  auto chain = BuildTokenChain(
      {.render_url = "http://127.0.0.1:1", .render_timeout = std::chrono::milliseconds(50)});
  ASSERT_TRUE(chain.ok());
  OpenAiRequest r;
  std::vector<uint32_t> tokens;
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":[7,8]})", "/v1/completions", &r).ok());
  EXPECT_EQ((*chain)->Tokens(r, "", &tokens), TokenOutcome::kTokens);
  EXPECT_EQ(tokens, (std::vector<uint32_t>{7, 8}));
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"text"})", "/v1/completions", &r).ok());
  EXPECT_EQ((*chain)->Tokens(r, "{}", &tokens), TokenOutcome::kFailed);
  auto counts = (*chain)->Counts();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].tokens, 1u);
  EXPECT_EQ(counts[1].failed, 1u);
}

TEST(TokenChainTest, RenderAnswerShapes) {
  std::vector<uint32_t> out;
  ASSERT_TRUE(ParseRenderAnswer(R"({"token_ids":[1,2]})", &out).ok());
  EXPECT_EQ(out, (std::vector<uint32_t>{1, 2}));
  ASSERT_TRUE(ParseRenderAnswer(R"([{"prompt_token_ids":[3]}])", &out).ok());
  EXPECT_EQ(out, (std::vector<uint32_t>{3}));
  EXPECT_FALSE(ParseRenderAnswer(R"({"ids":[1]})", &out).ok());
  EXPECT_FALSE(ParseRenderAnswer(R"({"token_ids":[-1]})", &out).ok());
}

}  // namespace
}  // namespace kvindex::epp
