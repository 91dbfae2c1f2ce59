// PrefixCache: every answer equals Tokenizer::Encode whatever the prompts'
// history (growing conversations, edits inside a cached prompt, edits just
// after an added token, repeats, shorter prompts), hits are counted, and
// the LRU bounds hold. The resume rules themselves are the tokenizer's
// (checkpoints) and the cache's (margin): a break in either shows here.
#include "shared/tokenize/prefix_cache.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace kvindex::tokenize {
namespace {

// Byte-level BPE with Llama 3's split pattern (line checkpoints on) and two
// added tokens, one a prefix of the other ("<t>" and "<t>long": resuming
// right after "<t>" is wrong when "long" follows).
constexpr char kSpec[] = R"({
  "version": "1.0", "added_tokens": [
    {"id": 40, "content": "<t>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 41, "content": "<t>long", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 42, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [42], "tokens": ["<s>"]}}},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
    "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "Ċ": 4, "č": 5, "1": 6, "2": 7, "l": 8, "o": 9, "n": 10, "g": 11,
              "<": 12, ">": 13, "t": 14, "Ã": 15, "©": 16, "ab": 17, "Ġa": 18, "Ġab": 19, "ĊĊ": 20, "ĠĠ": 21,
              "12": 22, "abc": 23, "lo": 24, "ng": 25, "long": 26, "Ġl": 27, "Ã©": 28, "čĊ": 29, "ĊĠ": 30},
    "merges": ["Ċ Ġ", "a b", "Ġ a", "Ġa b", "Ċ Ċ", "Ġ Ġ", "1 2", "ab c", "l o", "n g", "lo ng", "Ġ l", "Ã ©", "č Ċ"]}
})";

std::unique_ptr<Tokenizer> Load() {
  auto tok = Tokenizer::FromJson(kSpec, "");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(PrefixCacheTest, EveryAnswerEqualsAFreshEncode) {
  auto tok = Load();
  ASSERT_NE(tok, nullptr);
  PrefixCache cache(tok.get(), {.max_entries = 8});
  static const char* kPieces[] = {"a",       "b",    "c",   " ",     "\n", "<t>",
                                  "<t>long", "long", "12",  "\r\n",  "  ", "é",
                                  "ab",      "\n\n", "<s>", "<t>lo", "x",  "        "};
  std::mt19937 rng(23);
  std::vector<std::string> history{""};
  for (int step = 0; step < 3000; ++step) {
    std::string prompt = history[rng() % history.size()];
    switch (rng() % 4) {
      case 0:  // cut somewhere (an edit inside a cached prompt), then append
        prompt.resize(prompt.empty() ? 0 : rng() % prompt.size());
        while (!prompt.empty() && (static_cast<unsigned char>(prompt.back()) & 0xC0) == 0x80) {
          prompt.pop_back();  // not inside a UTF-8 sequence
        }
        if (!prompt.empty() && static_cast<unsigned char>(prompt.back()) >= 0xC0) prompt.pop_back();
        [[fallthrough]];
      default:  // the next turn
        for (int n = 1 + static_cast<int>(rng() % 6); n > 0; --n)
          prompt += kPieces[rng() % std::size(kPieces)];
        break;
      case 3:  // the same prompt again
        break;
    }
    const bool special = rng() % 2 == 0;
    auto want = tok->Encode(prompt, special);
    auto got = cache.Encode(prompt, special);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    ASSERT_EQ(*got, *want) << "prompt " << step << ": \"" << prompt << "\"";
    history.push_back(std::move(prompt));
    if (history.size() > 12) history.erase(history.begin());
  }
  const PrefixCache::Stats stats = cache.stats();
  EXPECT_GT(stats.hits, 1000u);
  EXPECT_GT(stats.bytes_reused, stats.bytes_encoded);
  EXPECT_LE(stats.entries, 8u);
  EXPECT_GT(stats.evictions, 0u);
}

// Directly: a prompt that turns a cached "<t>" into the longer added token
// "<t>long" must not resume right after "<t>".
TEST(PrefixCacheTest, DoesNotResumeInsideALongerAddedToken) {
  auto tok = Load();
  ASSERT_NE(tok, nullptr);
  PrefixCache cache(tok.get(), {});
  ASSERT_TRUE(cache.Encode("ab\nab<t>", false).ok());
  auto ids = cache.Encode("ab\nab<t>longer", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, *tok->Encode("ab\nab<t>longer", false));
  // ... "<t>long" (id 32: the next after the vocabulary, as Hugging Face
  // assigns it), then "er" ("e" and "r" are not in the vocabulary).
  EXPECT_EQ(ids->back(), 32u);
}

// A line starting with whitespace is no boundary: "\s*[\r\n]+" may take the
// newline before it together with whitespace and a later newline.
TEST(PrefixCacheTest, DoesNotResumeAtALineStartingWithWhitespace) {
  auto tok = Load();
  ASSERT_NE(tok, nullptr);
  PrefixCache cache(tok.get(), {});
  const std::string spaces(9, ' ');
  ASSERT_TRUE(cache.Encode("ab\n" + spaces + "b", false).ok());
  auto ids = cache.Encode("ab\n" + spaces + "\nb", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, *tok->Encode("ab\n" + spaces + "\nb", false));
}

TEST(PrefixCacheTest, LeastRecentlyUsedGoesFirstAndHitsAreCounted) {
  auto tok = Load();
  ASSERT_NE(tok, nullptr);
  PrefixCache cache(tok.get(), {.max_entries = 2});
  // Prompts longer than the resume margin (7 bytes: "<t>long").
  for (const char* p : {"a\nb\nc\nabc", "b\nc\na\nabc", "c\na\nb\nabc"}) {
    ASSERT_TRUE(cache.Encode(p).ok());
  }
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().misses, 3u);
  ASSERT_TRUE(cache.Encode("c\na\nb\nabc\nab").ok());  // extends a cached prompt: a hit
  EXPECT_EQ(cache.stats().hits, 1u);
  // Resumed at the start of a line at least the margin before the end of
  // the common part ("c\na\nb\nabc": the line "a" at byte 2).
  EXPECT_EQ(cache.stats().bytes_reused, 2u);
  ASSERT_TRUE(cache.Encode("a\nb\nc\nabc\nab").ok());  // its prompt was evicted: a miss
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 4u);
}

// SentencePiece-style models (Llama 2: Prepend "▁" + Replace " " -> "▁";
// Gemma 3: Replace, then a Split on " " that never matches) resume inside
// plain text, before a space whose preceding character no merge joins to
// "▁". The vocabulary has merges that do join across "▁" ("a ▁", "c ▁",
// "▁ ▁") so a cut at an unsafe space gives other ids; byte fallback for the
// rest, added tokens that swallow whitespace (lstrip "<L>", rstrip "<R>").
std::unique_ptr<Tokenizer> LoadSentencePiece(bool gemma) {
  const std::string m = "\u2581";
  nlohmann::json vocab = nlohmann::json::object();
  auto add = [&](const std::string& token) {
    if (!vocab.contains(token)) vocab[token] = vocab.size();
  };
  for (const char* t : {"<unk>", "<s>", "</s>"}) add(t);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name);
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {m, "a"}, {"a", m},       {m + "a", "b"}, {"b", "c"},      {m, m},         {"c", m},
      {m, "b"}, {m + "b", "c"}, {"a", "b"},     {m + m, "a"},    {"a" + m, "b"}, {"x", "y"},
      {m, "x"}, {m + "x", "y"}, {"c" + m, m},   {m + "ab", "c"}, {"ab", "c"}};
  for (const char* t : {"a", "b", "c", "x", "y", "\n"}) add(t);
  add(m);
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [l, r] : merges) {
    add(l);
    add(r);
    add(l + r);
    merge_list.push_back(l + " " + r);
  }
  nlohmann::json added = nlohmann::json::array();
  auto add_special = [&](const std::string& content, bool lstrip, bool rstrip) {
    add(content);
    added.push_back({{"id", vocab[content]},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", lstrip},
                     {"rstrip", rstrip},
                     {"normalized", false},
                     {"special", true}});
  };
  add_special("<s>", false, false);
  add_special("</s>", false, false);
  add_special("<L>", true, false);
  add_special("<R>", false, true);
  if (gemma) {
    add_special("\n", false, false);
    add_special(m + m, false, false);
  }
  nlohmann::json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}};
  nlohmann::json spec = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       gemma ? replace
             : nlohmann::json{{"type", "Sequence"},
                              {"normalizers", {{{"type", "Prepend"}, {"prepend", m}}, replace}}}},
      {"pre_tokenizer", gemma ? nlohmann::json{{"type", "Split"},
                                               {"pattern", {{"String", " "}}},
                                               {"behavior", "MergedWithPrevious"},
                                               {"invert", false}}
                              : nlohmann::json()},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", nlohmann::json::array()},
        {"special_tokens",
         {{"<s>", {{"id", "<s>"}, {"ids", {vocab["<s>"]}}, {"tokens", {"<s>"}}}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  auto tok = Tokenizer::FromJson(spec.dump(), "");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

void ConversationsEqualFreshEncodes(bool gemma) {
  auto tok = LoadSentencePiece(gemma);
  ASSERT_NE(tok, nullptr);
  static const char* kPieces[] = {"a",  "b",    "c",  " ",   "  ",   "x",      "y",   "ab",
                                  " a", "c ",   "\n", "<s>", "</s>", "<L>",    "<R>", "\t",
                                  "é",  "ab c", "xy", " \n", "c  ",  "\u2581", "ca",  "a a"};
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    PrefixCache cache(tok.get(), {.max_entries = 4});
    std::mt19937 rng(seed);
    std::string prompt;
    for (int turn = 0; turn < 30; ++turn) {
      if (rng() % 5 == 0 && !prompt.empty()) {  // an edit: cut anywhere, then go on
        prompt.resize(rng() % prompt.size());
        while (!prompt.empty() && (static_cast<unsigned char>(prompt.back()) & 0xC0) == 0x80) {
          prompt.pop_back();
        }
        if (!prompt.empty() && static_cast<unsigned char>(prompt.back()) >= 0xC0) {
          prompt.pop_back();
        }
      }
      for (int n = 4 + static_cast<int>(rng() % 40); n > 0; --n) {
        prompt += kPieces[rng() % std::size(kPieces)];
      }
      const bool special = rng() % 2 == 0;
      auto want = tok->Encode(prompt, special);
      auto got = cache.Encode(prompt, special);
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
      ASSERT_EQ(*got, *want) << "seed " << seed << " turn " << turn << ": \"" << prompt << "\"";
    }
  }
}

TEST(PrefixCacheTest, SentencePieceConversationsEqualFreshEncodes) {
  ConversationsEqualFreshEncodes(/*gemma=*/false);
  ConversationsEqualFreshEncodes(/*gemma=*/true);
}

// Plain text without any added token resumes inside it: the next turn
// encodes about its new text only.
TEST(PrefixCacheTest, SentencePieceResumesInsidePlainText) {
  for (bool gemma : {false, true}) {
    auto tok = LoadSentencePiece(gemma);
    ASSERT_NE(tok, nullptr);
    PrefixCache cache(tok.get(), {});
    std::string prompt;
    for (int i = 0; i < 100; ++i) prompt += "xy ab c ";
    ASSERT_TRUE(cache.Encode(prompt).ok());
    const std::string longer = prompt + "ab xy";
    auto ids = cache.Encode(longer);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, *tok->Encode(longer));
    const PrefixCache::Stats stats = cache.stats();
    EXPECT_EQ(stats.hits, 1u);
    EXPECT_GE(stats.bytes_reused + Tokenizer::kCheckpointSpacing + 16, prompt.size());
  }
}

// No resume point right after whitespace: an added token with lstrip
// ("<L>") swallows the whitespace before it, the "\n" before the cut too.
TEST(PrefixCacheTest, SentencePieceDoesNotResumeAfterWhitespace) {
  for (bool gemma : {false, true}) {
    auto tok = LoadSentencePiece(gemma);
    ASSERT_NE(tok, nullptr);
    PrefixCache cache(tok.get(), {});
    std::string start;
    for (int i = 0; i < 40; ++i) start += "xy";
    start += "\n        ";
    ASSERT_TRUE(cache.Encode(start + "abc").ok());
    auto ids = cache.Encode(start + "<L>");
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, *tok->Encode(start + "<L>")) << (gemma ? "gemma" : "llama2");
  }
}

}  // namespace
}  // namespace kvindex::tokenize
