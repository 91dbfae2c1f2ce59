// vLLM's chat preprocessing, content-format detection and request parsing
// (chat_messages.h, chat_request.h, chat_encoder.h). The end-to-end ids
// against vLLM's pipeline on real models: ctest chat_golden.
#include <gtest/gtest.h>

#include <string>

#include "shared/tokenize/chat_encoder.h"
#include "shared/tokenize/chat_messages.h"
#include "shared/tokenize/chat_request.h"
#include "shared/tokenize/chat_template/chat_template.h"
#include "shared/tokenize/tokenizer.h"

namespace kvindex::tokenize {
namespace {

using Json = nlohmann::ordered_json;

Json Prepare(const char* messages, ContentFormat format = ContentFormat::kString) {
  auto out = PrepareMessages(Json::parse(messages), format);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : Json();
}

TEST(ChatMessagesTest, FlattensContentPartsForStringTemplates) {
  const Json out = Prepare(R"([{"role": "user", "content": [
      {"type": "text", "text": "a"}, "b", {"type": "text", "text": ""},
      {"type": "text", "text": null}, {"type": "input_text", "text": "c"},
      {"type": "refusal", "refusal": "no"}]}, {"role": "system", "content": null}])");
  EXPECT_EQ(out.dump(),
            R"([{"role":"user","content":"a\nb\nc\nno"},{"role":"system","content":""}])");
}

TEST(ChatMessagesTest, WrapsPartsForOpenAiTemplates) {
  const Json out = Prepare(
      R"([{"role": "user", "content": "hi"}, {"role": "user", "content": ["x", {"type": "text", "text": ""}]}])",
      ContentFormat::kOpenAi);
  EXPECT_EQ(out.dump(),
            R"([{"role":"user","content":[{"type":"text","text":"hi"}]},)"
            R"({"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":""}]}])");
}

TEST(ChatMessagesTest, AssistantToolCallsAndReasoning) {
  const Json out = Prepare(R"([
    {"role": "assistant", "content": null, "extra": 1, "reasoning": "r", "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [2]}"}},
      {"id": "2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
      {"id": "3", "type": "function", "function": {"name": "h"}}]},
    {"role": "assistant", "content": "x", "tool_calls": []},
    {"role": "tool", "tool_call_id": "1", "content": "42", "name": "f"}])");
  EXPECT_EQ(out[0].dump(),
            R"({"role":"assistant","content":"","tool_calls":[)"
            R"({"id":"1","type":"function","function":{"name":"f","arguments":{"b":1,"a":[2]}}},)"
            R"({"id":"2","type":"function","function":{"name":"g","arguments":{}}},)"
            R"({"id":"3","type":"function","function":{"name":"h","arguments":{}}}],)"
            R"("reasoning":"r","reasoning_content":"r"})");
  EXPECT_EQ(out[1].dump(), R"({"role":"assistant","content":"x"})");
  EXPECT_EQ(out[2].dump(), R"({"role":"tool","content":"42","tool_call_id":"1","name":"f"})");
}

TEST(ChatMessagesTest, ToolContentListJoinedInOpenAiFormat) {
  const Json out = Prepare(R"([{"role": "tool", "content": [{"type": "text", "text": "a"}, "b"]}])",
                           ContentFormat::kOpenAi);
  EXPECT_EQ(out[0]["content"], "a\nb");
}

TEST(ChatMessagesTest, RefusesWhatVllmRefusesAndMultimodal) {
  auto image = PrepareMessages(
      Json::parse(
          R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])"),
      ContentFormat::kString);
  EXPECT_TRUE(absl::IsUnimplemented(image.status())) << image.status().message();
  for (const char* bad :
       {R"([{"content": "x"}])", R"([{"role": "user", "content": [{"text": "x"}]}])",
        R"([{"role": "user", "content": [{"type": "video"}]}])",
        R"([{"role": "user", "content": 5}])",
        R"([{"role": "assistant", "tool_calls": [{"name": "f"}]}])"}) {
    auto out = PrepareMessages(Json::parse(bad), ContentFormat::kString);
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << bad;
  }
}

TEST(ChatMessagesTest, ToolsAsPydanticDumpsThem) {
  auto out = PrepareTools(Json::parse(
      R"([{"function": {"parameters": {"type": "object"}, "name": "f", "strict": true}}])"));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->dump(), R"([{"type":"function","function":{"name":"f","description":null,)"
                         R"("parameters":{"type":"object"},"strict":true}}])");
  EXPECT_FALSE(
      PrepareTools(Json::parse(R"([{"type": "custom", "function": {"name": "f"}}])")).ok());
}

bool Loops(const char* source) {
  auto t = chat_template::ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() && t->IteratesMessageContent();
}

TEST(ContentFormatTest, DetectsLoopsOverMessageContentAsVllm) {
  EXPECT_FALSE(Loops("{% for m in messages %}{{ m['content'] }}{% endfor %}"));
  EXPECT_TRUE(Loops(
      "{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}"));
  EXPECT_TRUE(
      Loops("{% set rest = messages[1:] %}{% for m in rest %}"
            "{% for p in m.content | list %}{% endfor %}{% endfor %}"));
  // Content of something that is not a message: not detected.
  EXPECT_FALSE(Loops("{% for m in tools %}{% for p in m.content %}{% endfor %}{% endfor %}"));
  // A tuple target where vLLM asserts: its default, string.
  EXPECT_FALSE(Loops("{% for m in messages %}{% for a, b in m.content %}{% endfor %}{% endfor %}"));
}

TEST(ChatRequestTest, ParsesBodiesAndBareArrays) {
  auto body = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false,
          "tools": [{"function": {"name": "f"}}], "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_FALSE(body->add_generation_prompt);
  EXPECT_EQ(body->tools.size(), 1u);
  EXPECT_EQ(body->chat_template_kwargs.dump(), R"({"enable_thinking":false})");
  auto bare = ParseChatRequest(R"([{"role": "user", "content": "x"}])");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->add_generation_prompt);
  EXPECT_FALSE(bare->add_special_tokens);
  for (const char* bad :
       {"{", R"({"messages": 1})", R"({"messages": [], "add_generation_prompt": 1})",
        R"({"messages": [], "tools": {}})", "3"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseChatRequest(bad).status())) << bad;
  }
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_NE(ParseChatRequest(deep).status().message().find("deeper"), std::string::npos);
}

// A byte-level tokenizer over a few letters whose config carries a chat template.
constexpr char kTokenizerJson[] = R"({
  "version": "1.0", "added_tokens": [
    {"id": 7, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, ":": 2, "|": 3, "Ċ": 4, "x": 5, "y": 6},
    "merges": []}
})";

TEST(ChatEncoderTest, RendersPreparedMessagesAndTokenizesWithoutSpecialTokens) {
  const char* config = R"({"bos_token": "<s>", "chat_template":
    "{{ bos_token }}{% for m in messages %}{{ m.role[0] }}:{{ m.content }}|{% endfor %}{% if add_generation_prompt %}a:{% endif %}"})";
  auto tok = Tokenizer::FromJson(kTokenizerJson, config);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  ASSERT_NE((*tok)->chat(), nullptr) << (*tok)->chat_status().message();
  auto request = ParseChatRequest(
      R"({"messages": [{"role": "bob", "content": [{"type": "text", "text": "x"}, "y"]}]})");
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(*(*tok)->chat()->Render(*request), "<s>b:x\ny|a:");
  auto ids = EncodeChat(**tok, *request);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(*ids, (std::vector<uint32_t>{7, 1, 2, 5, 4, 6, 3, 0, 2}));  // one BOS, the template's
  request->add_special_tokens = true;
  EXPECT_EQ(EncodeChat(**tok, *request)->front(), 7u);
  EXPECT_EQ(EncodeChat(**tok, *request)->at(1), 7u);  // vLLM would double it too
  request->continue_final_message = true;
  EXPECT_TRUE(absl::IsUnimplemented(EncodeChat(**tok, *request).status()));
}

TEST(ChatEncoderTest, ModelsWithoutRenderableTemplatesSayWhy) {
  auto none = Tokenizer::FromJson(kTokenizerJson, "{}");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->chat(), nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(EncodeChat(**none, ChatRequest{}).status()));
  auto unsupported =
      Tokenizer::FromJson(kTokenizerJson, R"({"chat_template": "{{ x | wordwrap }}"})");
  ASSERT_TRUE(unsupported.ok());  // text still encodes
  EXPECT_EQ((*unsupported)->chat(), nullptr);
  EXPECT_NE((*unsupported)->chat_status().message().find("wordwrap"), std::string::npos);
}

}  // namespace
}  // namespace kvindex::tokenize
