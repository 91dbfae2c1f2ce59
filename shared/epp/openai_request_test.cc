#include "shared/epp/openai_request.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

// The common body (a token-id or text prompt) is read on demand, anything
// else by the DOM parse: both must give the same answers. These pass
// with either path alone.
TEST(OpenAiRequestTest, OnDemandAgreesWithDom) {
  OpenAiRequest r;
  for (const char* bad : {R"({"model":"m","prompt":[1,2]} x)",            // trailing content
                          R"({"model":"m","prompt":[1,2]}{})",            // a second document
                          R"({"model":"m","prompt":[1],"x":tru})",        // a bad atom elsewhere
                          R"({"model":"m","prompt":[1],"x":"\q"})",       // a bad escape elsewhere
                          R"({"model":"m","prompt":[1],"n":01})",         // a bad number elsewhere
                          R"({"model":"m","prompt":[1],"o":{"a":[1,}})",  // a bad nested value
                          R"({"model":"m","prompt":[1.0]})", R"({"model":"m","prompt":[1e2]})",
                          R"({"model":"m","prompt":[1,"2"]})",
                          R"({"model":"m","prompt":[1]})"
                          "\xff",  // not UTF-8 after the object
                          R"({"model":"","prompt":[1]})", R"({"model":7,"prompt":[1]})",
                          R"({"model":"m","prompt":[1])", R"({"model":"m","prompt":{}})"}) {
    EXPECT_FALSE(ParseOpenAiRequest(bad, "/v1/completions", &r).ok()) << bad;
  }
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"a","model":"b","prompt":[1],"prompt":[2]})",
                                 "/v1/completions", &r)
                  .ok());
  EXPECT_EQ(r.model, "a");  // the first of duplicate keys
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{1}));
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":[-0,3]})", "/v1/completions", &r).ok());
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{0, 3}));  // -0 is 0 to both
  ASSERT_TRUE(ParseOpenAiRequest(
                  R"( {"max_tokens":1,"o":{"a":[true,false,null,-1.5e3,"é"]},"cache_salt":5,)"
                  R"("model":"m1","prompt":[4294967295,0]} )",
                  "/v1/completions", &r)
                  .ok());
  EXPECT_EQ(r.model, "m1");
  EXPECT_EQ(r.cache_salt, "");  // not a string: none
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{4294967295u, 0}));
  ASSERT_TRUE(
      ParseOpenAiRequest(R"({"model":"m","prompt":[1],"messages":[]})", "/v1/completions", &r)
          .ok());
  EXPECT_EQ(r.kind, OpenAiRequest::Kind::kCompletions);
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{1}));
  ASSERT_TRUE(
      ParseOpenAiRequest(R"({"model":"m","prompt":null,"messages":[]})", "/v1/completions", &r)
          .ok());
  EXPECT_EQ(r.kind, OpenAiRequest::Kind::kChat);
}

// The token-id prompt of the on-demand path is decoded by /v1/match's
// scanner (query::FastParseU32Array); what it declines goes to the DOM
// parse. Every body gets the same status, message and fields from
// ParseOpenAiRequest as from the DOM parse alone.
TEST(OpenAiRequestTest, TokenArrayEdgesAgreeWithDom) {
  std::vector<std::string> prompts = {
      // spaces, inside and around the array
      "[ 1 , 2 ,3 ]", "[\n1,\t2\r\n]", "[1,2] ", "[1,2]\n\t", " [7]",
      // negative
      "[-1]", "[1,-2]", "[-0]", "[-0,3]", "[- 1]",
      // beyond 2^32-1 (and u64)
      "[4294967295]", "[4294967296]", "[99999999999]", "[18446744073709551616]",
      "[1000000000,4294967295,0]", "[0004294967295]",
      // floats and exponents
      "[1.0]", "[1.5]", "[0.0]", "[1.]", "[.5]", "[1e2]", "[1E0]", "[1e+2]", "[1e-2]", "[2,3.25]",
      // empty and nested
      "[]", "[ ]", "[[1,2],[3]]", "[[1],2]", "[1,[2]]", "[[]]", "[[ ]]", "[[-1]]",
      // leading zeros, signs, other atoms, broken arrays
      "[01]", "[00]", "[0]", "[+1]", "[true]", "[null]", "[\"1\"]", "[1,\"a]\"]", "[1,,2]", "[,1]",
      "[1,]", "[1 2]", "[1", "[1}", "[1]]", "{}", "7", "null"};
  // Long arrays: the scanner's 64-byte blocks, with a bad element deep inside.
  std::string long_ids = "[";
  for (uint32_t i = 0; i < 8192; ++i) {
    if (i != 0) long_ids += ',';
    long_ids += std::to_string((i * 2654435761u) % 200000u >> (i % 17));
  }
  prompts.push_back(long_ids + "]");
  for (const char* bad : {"1.5", "-3", "1e3", "4294967296", " 01", "[2]", "\"9\""}) {
    std::string body = long_ids;
    body.insert(body.find(',', 5000 * 5) + 1, std::string(bad) + ",");
    prompts.push_back(body + "]");
  }
  for (const std::string& prompt : prompts) {
    for (const std::string& body : {R"({"model":"m","prompt":)" + prompt + "}",
                                    R"({"prompt":)" + prompt + R"(,"model":"m","cache_salt":"s"})",
                                    R"({"model":"m","prompt":)" + prompt + R"( ,"x":"]"})"}) {
      OpenAiRequest fast, dom;
      const Status a = ParseOpenAiRequest(body, "/v1/completions", &fast);
      const Status b = internal::ParseOpenAiRequestWithDom(body, "/v1/completions", &dom);
      const std::string what = body.substr(0, 120);
      ASSERT_EQ(a.ok(), b.ok()) << what << ": " << a << " / " << b;
      EXPECT_EQ(a.message(), b.message()) << what;
      EXPECT_EQ(fast.model, dom.model) << what;
      EXPECT_EQ(fast.cache_salt, dom.cache_salt) << what;
      EXPECT_EQ(fast.kind, dom.kind) << what;
      EXPECT_EQ(fast.has_prompt_tokens, dom.has_prompt_tokens) << what;
      EXPECT_EQ(fast.prompt_tokens, dom.prompt_tokens) << what;
      EXPECT_EQ(fast.has_prompt_text, dom.has_prompt_text) << what;
    }
  }
  // Spot checks that the comparison has both outcomes to compare.
  OpenAiRequest r;
  ASSERT_TRUE(
      ParseOpenAiRequest(R"({"model":"m","prompt":[ 1 , 2 ,3 ] })", "/v1/completions", &r).ok());
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{1, 2, 3}));
  ASSERT_TRUE(
      ParseOpenAiRequest(R"({"model":"m","prompt":)" + long_ids + "]}", "/v1/completions", &r)
          .ok());
  EXPECT_EQ(r.prompt_tokens.size(), 8192u);
  for (const char* bad : {"[1.0]", "[1e2]", "[-1]", "[4294967296]", "[]", "[01]"}) {
    EXPECT_FALSE(ParseOpenAiRequest(std::string(R"({"model":"m","prompt":)") + bad + "}",
                                    "/v1/completions", &r)
                     .ok())
        << bad;
  }
}

// The whole-body scanner (the usual completions body, read without
// simdjson) takes the common bodies, and for every body, taken or declined,
// ParseOpenAiRequest answers as the DOM parse alone does.
TEST(OpenAiRequestTest, ScannerTakesCommonBodiesAndAgreesWithDom) {
  OpenAiRequest r;
  for (const char* common :
       {R"({"model":"m","prompt":[1,2,3],"max_tokens":1})",
        R"( { "model" : "m" , "prompt" : [ 1 , 2 ] , "stream" : false } )",
        R"({"prompt":"hi","model":"m","temperature":0.7,"top_p":1e-2,"seed":-3,"user":null})",
        R"({"model":"m","cache_salt":"s","prompt":[4294967295,0],"n":1,"echo":true})",
        R"({"model":"m","prompt":[7],"cache_salt":null,"x":-0.5E+12})"}) {
    EXPECT_TRUE(internal::ScanOpenAiCompletions(common, &r)) << common;
  }
  ASSERT_TRUE(internal::ScanOpenAiCompletions(
      R"({"model":"m1","prompt":[5,6],"cache_salt":"s","max_tokens":1})", &r));
  EXPECT_EQ(r.model, "m1");
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_EQ(r.kind, OpenAiRequest::Kind::kCompletions);
  EXPECT_TRUE(r.has_prompt_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<uint32_t>{5, 6}));
  ASSERT_TRUE(internal::ScanOpenAiCompletions(R"({"model":"m","prompt":"a b"})", &r));
  EXPECT_TRUE(r.has_prompt_text);
  EXPECT_EQ(r.prompt_text, "a b");
  EXPECT_FALSE(r.has_prompt_tokens);

  // Other fields' values, some valid, some not, some the scanner declines.
  const std::vector<std::string> values = {"1",
                                           "0",
                                           "-0",
                                           "-0.0",
                                           "12.5",
                                           "1e5",
                                           "1E-5",
                                           "1e+05",
                                           "-1.25e-3",
                                           "123456789012345",
                                           "1234567890123456",
                                           "12345678901234567890",
                                           "184467440737095516160",
                                           "1.0000000000000001",
                                           "1e308",
                                           "1e309",
                                           "1e400",
                                           "-1e400",
                                           "1e-400",
                                           "01",
                                           "-",
                                           "-a",
                                           "1.",
                                           ".5",
                                           "1e",
                                           "1e+",
                                           "+1",
                                           "0x1",
                                           "NaN",
                                           "Infinity",
                                           "true",
                                           "false",
                                           "null",
                                           "tru",
                                           "nul",
                                           "falsey",
                                           "\"\"",
                                           "\"x\"",
                                           "\"a\\nb\"",
                                           "\"\\u00e9\"",
                                           "\"\\q\"",
                                           "\"\xc3\xa9\"",
                                           "\"\xff\"",
                                           "\"\t\"",
                                           "[]",
                                           "[1,2]",
                                           "{}",
                                           "{\"a\":1}",
                                           "[1,",
                                           "{\"a\"}",
                                           "\"unterminated"};
  size_t taken = 0;
  for (const std::string& v : values) {
    for (const std::string& body :
         {R"({"model":"m","prompt":[1,2],"x":)" + v + "}",
          R"({"x":)" + v + R"(,"model":"m","prompt":"t"})",
          R"({"model":"m","cache_salt":)" + v + R"(,"prompt":[3]})",
          R"({"model":)" + v + R"(,"prompt":[3]})", R"({"model":"m","prompt":)" + v + "}",
          R"({"model":"m","prompt":[1],"model":)" + v + "}", R"({"model":"m","prompt":[1]})" + v,
          R"({"model":"m","prompt":[1], )" + v + "}"}) {
      OpenAiRequest scanned, full, dom;
      const bool took = internal::ScanOpenAiCompletions(body, &scanned);
      taken += took;
      const Status a = ParseOpenAiRequest(body, "/v1/completions", &full);
      const Status b = internal::ParseOpenAiRequestWithDom(body, "/v1/completions", &dom);
      const std::string what = body.substr(0, 120);
      ASSERT_EQ(a.ok(), b.ok()) << what << ": " << a << " / " << b;
      EXPECT_EQ(a.message(), b.message()) << what;
      if (took) {
        ASSERT_TRUE(b.ok()) << what << ": the scanner took what the DOM parse refuses: " << b;
      }
      for (const OpenAiRequest* x : {&full, took ? &scanned : &full}) {
        EXPECT_EQ(x->model, dom.model) << what;
        EXPECT_EQ(x->cache_salt, dom.cache_salt) << what;
        EXPECT_EQ(x->kind, dom.kind) << what;
        EXPECT_EQ(x->has_prompt_tokens, dom.has_prompt_tokens) << what;
        EXPECT_EQ(x->prompt_tokens, dom.prompt_tokens) << what;
        EXPECT_EQ(x->has_prompt_text, dom.has_prompt_text) << what;
        EXPECT_EQ(x->prompt_text, dom.prompt_text) << what;
      }
    }
  }
  EXPECT_GE(taken, 40u);  // the comparison covers bodies the scanner took
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

// --tokenizer: a text prompt of a model with a tokenizer is encoded in
// process (BOS included, as vLLM adds it), before the render endpoint; so is
// a chat request, through the model's chat template (whose BOS is the only
// one, as in vLLM); a chat this process cannot render (multimodal) and a
// model without a tokenizer go on to the render endpoint.
TEST(TokenChainTest, InProcessTokenizerBeforeRender) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvindex-epp-tokenizer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"version": "1.0",
    "added_tokens": [{"id": 9, "content": "<s>", "single_word": false, "lstrip": false,
      "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
      "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [9], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
      "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4, "Ġa": 5},
      "merges": ["a b", "Ġ a", "Ġa b"]}})";
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "chat_template": "{{ bos_token }}{% for m in messages %})"
         R"({{ m.content }}{% endfor %}"})";
  auto registry = tokenize::TokenizerRegistry::Load({"m=" + dir.string()});
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto chain = BuildTokenChain({.render_url = "http://127.0.0.1:1",
                                .render_timeout = std::chrono::milliseconds(50),
                                .tokenizers = registry->get()});
  ASSERT_TRUE(chain.ok());
  OpenAiRequest r;
  std::vector<uint32_t> tokens;
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"ab ab"})", "/v1/completions", &r).ok());
  EXPECT_EQ((*chain)->Tokens(r, "", &tokens), TokenOutcome::kTokens);
  EXPECT_EQ(tokens, (std::vector<uint32_t>{9, 2, 3, 2}));  // "a b" merges first
  const std::string chat = R"({"model":"m","messages":[{"role":"user","content":[)"
                           R"({"type":"text","text":"ab"},{"type":"text","text":"ab"}]}]})";
  ASSERT_TRUE(ParseOpenAiRequest(chat, "/v1/chat/completions", &r).ok());
  tokens.clear();
  EXPECT_EQ((*chain)->Tokens(r, chat, &tokens), TokenOutcome::kTokens);
  // Parts joined with "\n" (not in the vocabulary: dropped); one BOS, the
  // template's "<s>" as an added token (id 6 as Hugging Face assigns it: the
  // file's 9 is not in the vocabulary).
  EXPECT_EQ(tokens, (std::vector<uint32_t>{6, 2, 2}));
  const std::string image = R"({"model":"m","messages":[{"role":"user","content":[)"
                            R"({"type":"image_url","image_url":{"url":"x"}}]}]})";
  ASSERT_TRUE(ParseOpenAiRequest(image, "/v1/chat/completions", &r).ok());
  EXPECT_EQ((*chain)->Tokens(r, image, &tokens), TokenOutcome::kFailed);  // render: nobody there
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"other","prompt":"ab"})", "/v1/completions", &r).ok());
  EXPECT_EQ((*chain)->Tokens(r, "{}", &tokens), TokenOutcome::kFailed);  // render: nobody there
  auto counts = (*chain)->Counts();
  ASSERT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts[1].name, "tokenizer");
  EXPECT_EQ(counts[1].tokens, 2u);
  EXPECT_EQ(counts[1].skipped, 2u);
  EXPECT_EQ(counts[2].failed, 2u);
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
