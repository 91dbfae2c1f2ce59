// Tokenizer on small hand-written tokenizer.json files: each rule of Hugging
// Face's pipeline that the six real models (exactness/run.sh) may not reach.
// Expected ids were checked once against the tokenizers Node binding.
#include "shared/tokenize/tokenizer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "shared/tokenize/registry.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvindex::tokenize {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<uint32_t>;

// Byte-level BPE over a, b, c and space (GPT-2 alphabet: ' ' is "Ġ").
Json ByteLevelSpec() {
  return Json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 100, "content": "<|s|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 101, "content": "<|strip|>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|s|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<|s|>": {"id": "<|s|>", "ids": [100], "tokens": ["<|s|>"]}}},
    "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
      "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "Ġ": 6, "Ġa": 7, "1": 8, "2": 9, "12": 10, "Ġabc": 11},
      "merges": ["b c", "a b", "a bc", "Ġ a", "1 2"]}
  })");
}

std::unique_ptr<Tokenizer> Make(const Json& spec) {
  auto tok = Tokenizer::FromJson(spec.dump(), "");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

Ids Encode(const Tokenizer& tok, std::string_view text, bool special = false) {
  auto ids = tok.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

TEST(TokenizerTest, MergesApplyLowestRankFirst) {
  auto tok = Make(ByteLevelSpec());
  ASSERT_NE(tok, nullptr);
  // "b c" (rank 0) beats "a b" (rank 1): a|bc, then "a bc" -> abc.
  EXPECT_EQ(Encode(*tok, "abc"), (Ids{5}));
  // " abc": Ġ a (rank 3) loses to b c and a bc; Ġ abc has no merge.
  EXPECT_EQ(Encode(*tok, " abc"), (Ids{6, 5}));
  EXPECT_EQ(Encode(*tok, "cab"), (Ids{2, 3}));
  // Digits: \p{N}{1,3} pieces.
  EXPECT_EQ(Encode(*tok, "1212"), (Ids{10, 8, 9}));
}

TEST(TokenizerTest, IgnoreMergesTakesWholeWordFromVocabulary) {
  Json spec = ByteLevelSpec();
  spec["model"]["ignore_merges"] = true;
  auto tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, " abc"), (Ids{11}));
}

TEST(TokenizerTest, SpecialTokensSplitAndTemplateAddsBos) {
  auto tok = Make(ByteLevelSpec());
  ASSERT_NE(tok, nullptr);
  // Added tokens outside the vocabulary take the ids after it (12, 13), as
  // HF assigns them, whatever the file says; the template's id is its own.
  EXPECT_EQ(Encode(*tok, "ab<|s|>c", false), (Ids{3, 12, 2}));
  EXPECT_EQ(Encode(*tok, "ab", true), (Ids{100, 3}));
  // lstrip / rstrip swallow the spaces beside the token.
  EXPECT_EQ(Encode(*tok, "ab  <|strip|>  c", false), (Ids{3, 13, 2}));
  // A look-alike is text.
  EXPECT_EQ(Encode(*tok, "<|s", false), (Ids{}));
}

TEST(TokenizerTest, InvalidUtf8IsRefusedWithItsOffset) {
  auto tok = Make(ByteLevelSpec());
  ASSERT_NE(tok, nullptr);
  for (std::string bad : {std::string("ab\xff"), std::string("\xc3"), std::string("\xed\xa0\x80"),
                          std::string("\xc0\xaf"), std::string("a\xf4\x90\x80\x80")}) {
    auto ids = tok->Encode(bad);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("UTF-8"), std::string_view::npos);
  }
}

TEST(TokenizerTest, MongolianVowelSeparatorIsNotWhitespace) {
  // Oniguruma (HF) follows Unicode White_Space; PCRE2 10.42's \s takes U+180E.
  Json spec = ByteLevelSpec();
  spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  spec["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  // "á" (U+00E1) in GPT-2's alphabet is the byte 0xE1.
  spec["model"]["vocab"]["\xC3\xA1"] = 20;
  auto tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  // "a b": the space is removed. "a\u180Eb": nothing removed, BPE sees the
  // three bytes of U+180E: 0xE1 (id 20) and two not in this vocabulary.
  EXPECT_EQ(Encode(*tok, "a b"), (Ids{0, 1}));
  EXPECT_EQ(Encode(*tok,
                   "a\xE1\xA0\x8E"
                   "b"),
            (Ids{0, 20, 1}));
  EXPECT_EQ(Encode(*tok, "ab c"), (Ids{3, 2}));
}

Json SentencePieceSpec() {
  return Json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
    ],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
      "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true,
      "vocab": {"<unk>": 0, "<s>": 1, "<0xC3>": 2, "<0xA9>": 3, "▁": 4, "h": 5, "i": 6, "hi": 7, "▁hi": 8},
      "merges": ["h i", "▁ hi"]}
  })");
}

TEST(TokenizerTest, SentencePieceByteFallbackAndPrepend) {
  auto tok = Make(SentencePieceSpec());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "hi", true), (Ids{1, 8}));
  // é is not in the vocabulary: its bytes <0xC3> <0xA9>.
  EXPECT_EQ(Encode(*tok, "hi é"), (Ids{8, 4, 2, 3}));
  // After an added token the next piece gets its own prepended ▁.
  EXPECT_EQ(Encode(*tok, "<s>hi"), (Ids{1, 8}));
}

TEST(TokenizerTest, UnknownCharactersFuseIntoOneUnk) {
  Json spec = SentencePieceSpec();
  spec["model"]["byte_fallback"] = false;
  auto tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "hi xyz"), (Ids{8, 4, 0}));
  spec["model"]["fuse_unk"] = false;
  tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "hi xyz"), (Ids{8, 4, 0, 0, 0}));
}

// A whole SentencePiece text is one BPE word, encoded in pieces cut before
// each "▁" that no merge can join to what precedes it (bpe.h). Merges that do
// join across a "▁" (here "i" + "▁hi", "▁" + "▁") keep the text whole there.
// Ids from the tokenizers Node binding on the same file.
TEST(TokenizerTest, SentencePieceMergesAcrossMetaspaceAreKept) {
  Json spec = SentencePieceSpec();
  spec["post_processor"] = nullptr;
  spec["model"]["vocab"]["▁▁"] = 9;
  spec["model"]["vocab"]["i▁hi"] = 10;
  spec["model"]["merges"] = Json::array({"h i", "▁ hi", "i ▁hi", "▁ ▁"});
  auto tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "i hi"), (Ids{4, 10}));
  EXPECT_EQ(Encode(*tok, "hi hi"), (Ids{8, 8}));
  EXPECT_EQ(Encode(*tok, "\u00e9 hi"), (Ids{4, 2, 3, 8}));
  EXPECT_EQ(Encode(*tok, "\u00e9  hi"), (Ids{4, 2, 3, 4, 8}));
  // Without unk or byte fallback an unknown character is dropped: the "▁"
  // on either side of it then merge.
  spec["model"]["unk_token"] = nullptr;
  spec["model"]["byte_fallback"] = false;
  tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "\u00e9 \u00e9"), (Ids{9}));
  EXPECT_EQ(Encode(*tok, "\u00e9 hi"), (Ids{4, 8}));
}

TEST(TokenizerTest, MetaspacePrependsOnlyAtTheStartWithSchemeFirst) {
  Json spec = SentencePieceSpec();
  spec["normalizer"] = nullptr;
  spec["pre_tokenizer"] = Json::parse(
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})");
  auto tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "hi"), (Ids{8}));
  EXPECT_EQ(Encode(*tok, "<s>hi"), (Ids{1, 7}));
}

TEST(TokenizerTest, UnsupportedComponentsAreRefusedByName) {
  Json spec = ByteLevelSpec();
  spec["normalizer"] = Json::parse(R"({"type": "BertNormalizer"})");
  auto tok = Tokenizer::FromJson(spec.dump(), "");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(tok.status().message().find("BertNormalizer"), std::string_view::npos);

  spec = ByteLevelSpec();
  spec["model"]["type"] = "Unigram";
  EXPECT_EQ(Tokenizer::FromJson(spec.dump(), "").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(Tokenizer::FromJson("{not json", "").ok());
  EXPECT_FALSE(Tokenizer::Load("/nonexistent-dir").ok());
}

TEST(TokenizerTest, ConfigGivesChatTemplateAndSpecialTokens) {
  auto tok = Tokenizer::FromJson(
      ByteLevelSpec().dump(),
      R"({"chat_template": "{{ messages }}", "bos_token": {"content": "<|s|>"}, "eos_token": "<|e|>"})");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->chat_template(), "{{ messages }}");
  EXPECT_EQ((*tok)->bos_token(), "<|s|>");
  EXPECT_EQ((*tok)->eos_token(), "<|e|>");
}

TEST(TokenizerRegistryTest, LoadsModelEqualsDirSpecs) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kvindex-tokenize-registry-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << ByteLevelSpec().dump();
  auto registry = TokenizerRegistry::Load({"m1=" + dir.string(), "other/model=" + dir.string()});
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_NE((*registry)->Find("m1"), nullptr);
  EXPECT_EQ(*(*registry)->Find("m1")->Encode("abc", false), (Ids{5}));
  EXPECT_NE((*registry)->Find("other/model"), nullptr);
  EXPECT_EQ((*registry)->Find("m2"), nullptr);

  EXPECT_FALSE(TokenizerRegistry::Load({"m1"}).ok());
  EXPECT_FALSE(TokenizerRegistry::Load({"=dir"}).ok());
  EXPECT_FALSE(TokenizerRegistry::Load({"m1=" + dir.string(), "m1=" + dir.string()}).ok());
  auto missing = TokenizerRegistry::Load({"m1=" + (dir / "nope").string()});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("m1="), std::string_view::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvindex::tokenize
