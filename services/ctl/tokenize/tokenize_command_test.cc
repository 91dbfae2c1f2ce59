#include "services/ctl/tokenize/tokenize_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvindex::ctl {
namespace {

// A byte-level tokenizer over a, b, c with BOS 6 (the unit tests of
// shared/tokenize hold the rules; this proves the command's plumbing).
constexpr char kTokenizerJson[] = R"({
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [
    {"id": 6, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [6], "tokens": ["<s>"]}}},
  "decoder": null,
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
    "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "Ġ": 4, "Ġc": 5}, "merges": ["a b", "Ġ c"]}
})";

class TokenizeCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvindex-ctl-tokenize-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "tokenizer.json") << kTokenizerJson;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  int Run(TokenizeArgs args) {
    args.tokenizer = args.tokenizer.empty() ? dir_.string() : args.tokenizer;
    out_.str("");
    err_.str("");
    return RunTokenize(args, out_, err_);
  }

  std::filesystem::path dir_;
  std::ostringstream out_, err_;
};

TEST_F(TokenizeCommandTest, PrintsIdsAsOneJsonLine) {
  TokenizeArgs args;
  args.text = "ab c";
  ASSERT_EQ(Run(args), 0) << err_.str();
  EXPECT_EQ(out_.str(), "{\"ids\": [6, 3, 5]}\n");
  args.add_special_tokens = false;
  ASSERT_EQ(Run(args), 0);
  EXPECT_EQ(out_.str(), "{\"ids\": [3, 5]}\n");
}

TEST_F(TokenizeCommandTest, ReadsFile) {
  std::ofstream(dir_ / "text.txt") << "c<s>ab";
  TokenizeArgs args;
  args.file = (dir_ / "text.txt").string();
  ASSERT_EQ(Run(args), 0) << err_.str();
  EXPECT_EQ(out_.str(), "{\"ids\": [6, 2, 6, 3]}\n");
}

TEST_F(TokenizeCommandTest, ChatRendersTheTemplateWithoutASecondBos) {
  std::ofstream(dir_ / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "chat_template": "{{ bos_token }}{% for m in messages %})"
         R"({{ m.content }}{% endfor %}{% if add_generation_prompt %} c{% endif %}"})";
  std::ofstream(dir_ / "chat.json") << R"([{"role": "user", "content": "ab"}])";
  TokenizeArgs args;
  args.chat = (dir_ / "chat.json").string();
  ASSERT_EQ(Run(args), 0) << err_.str();
  EXPECT_EQ(out_.str(), "{\"ids\": [6, 3, 5]}\n");  // the generation prompt " c" too
  std::ofstream(dir_ / "chat.json")
      << R"({"messages": [{"role": "user", "content": "ab"}], "add_generation_prompt": false})";
  ASSERT_EQ(Run(args), 0) << err_.str();
  EXPECT_EQ(out_.str(), "{\"ids\": [6, 3]}\n");
  std::ofstream(dir_ / "chat.json") << R"({"messages": 1})";
  EXPECT_EQ(Run(args), 1);
  EXPECT_NE(err_.str().find("'messages'"), std::string::npos) << err_.str();
  std::filesystem::remove(dir_ / "tokenizer_config.json");
  std::ofstream(dir_ / "chat.json") << R"([{"role": "user", "content": "ab"}])";
  EXPECT_EQ(Run(args), 1);
  EXPECT_NE(err_.str().find("chat_template"), std::string::npos) << err_.str();
}

TEST_F(TokenizeCommandTest, ErrorsAreOneLineAndExitOne) {
  TokenizeArgs args;
  args.text = "a\xff";
  EXPECT_EQ(Run(args), 1);
  EXPECT_NE(err_.str().find("UTF-8"), std::string::npos);
  EXPECT_EQ(out_.str(), "");
  args.tokenizer = (dir_ / "missing").string();
  EXPECT_EQ(Run(args), 1);
  args.tokenizer.clear();
  args.file = (dir_ / "missing.txt").string();
  EXPECT_EQ(Run(args), 1);
}

}  // namespace
}  // namespace kvindex::ctl
