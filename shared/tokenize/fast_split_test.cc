// FastSplit against PCRE2 (the reference it replaces): the same pre-tokens
// for the Llama 3 and Qwen patterns on seeded random text mixing every class
// the patterns distinguish, and on hand-picked edge cases.
#include "shared/tokenize/fast_split.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "shared/tokenize/regex.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using Spans = std::vector<std::pair<size_t, size_t>>;

Spans ByRegex(const Regex& regex, std::string_view text) {
  Spans spans;
  size_t prev = 0;
  EXPECT_TRUE(regex
                  .ForEachMatch(text,
                                [&](size_t start, size_t end) {
                                  if (start != prev) spans.push_back({prev, start});  // a gap
                                  spans.push_back({start, end});
                                  prev = end;
                                })
                  .ok());
  if (prev != text.size()) spans.push_back({prev, text.size()});
  return spans;
}

Spans ByFastSplit(const FastSplit& fast, std::string_view text) {
  Spans spans;
  for (size_t pos = 0, end; pos < text.size(); pos = end) {
    end = fast.MatchEnd(text, pos);
    EXPECT_GT(end, pos);
    if (end <= pos) break;
    spans.push_back({pos, end});
  }
  return spans;
}

// Code points of every class the patterns tell apart, and the characters
// their alternatives name: apostrophes and contraction letters (ſ folds to
// s), \r and \n, the space, Unicode spaces (U+180E is not White_Space),
// letters of several scripts, marks, numbers of categories Nd/Nl/No, emoji.
const std::vector<char32_t> kAlphabet = {
    'a',    'Z',    's',    'S',    't',     'T',     'r',    'R',     'e',      'E',    'v',
    'V',    'm',    'M',    'l',    'L',     'd',     'D',    'x',     '\'',     '\'',   '\'',
    '0',    '7',    '9',    ' ',    ' ',     ' ',     '\t',   '\r',    '\n',     '\n',   '\v',
    '\f',   '.',    ',',    '(',    '"',     '-',     '_',    '/',     '!',      '?',    0x17F,
    0x212A, 0xE9,   0x301,  0x5D0,  0x627,   0x4E2D,  0x65E5, 0x3042,  0xAC00,   0x416,  0x660,
    0x663,  0x2160, 0x2460, 0xBD,   0xFF11,  0x3000,  0xA0,   0x85,    0x2028,   0x2029, 0x202F,
    0x205F, 0x180E, 0x200B, 0xFEFF, 0x1F600, 0x1F469, 0x200D, 0x1D400, 0x10FFFD, 0xE000, 0x1F1FA};

std::string RandomText(std::mt19937_64& rng) {
  std::string text;
  std::uniform_int_distribution<size_t> length(1, 40);
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::uniform_int_distribution<int> run(1, 6);
  for (size_t n = length(rng); text.size() < 4 * n;) {
    char32_t cp = kAlphabet[pick(rng)];
    for (int r = run(rng); r > 0; --r) AppendUtf8(cp, &text);  // runs exercise the repeats
    if (text.size() > 200) break;
  }
  return text;
}

class FastSplitTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FastSplitTest, EqualsPcre2OnRandomText) {
  auto regex = Regex::Compile(GetParam());
  ASSERT_TRUE(regex.ok());
  auto fast = FastSplit::ForPattern(GetParam());
  ASSERT_TRUE(fast.has_value());
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 5000; ++i) {
      std::string text = RandomText(rng);
      ASSERT_EQ(ByFastSplit(*fast, text), ByRegex(**regex, text))
          << "seed " << seed << " text '" << text << "'";
    }
  }
}

TEST_P(FastSplitTest, EqualsPcre2OnEdgeCases) {
  auto regex = Regex::Compile(GetParam());
  ASSERT_TRUE(regex.ok());
  auto fast = FastSplit::ForPattern(GetParam());
  ASSERT_TRUE(fast.has_value());
  for (std::string_view text : {"'s",
                                "'S",
                                "'\xC5\xBF",
                                "'re",
                                "'RE",
                                "'rE x",
                                "'ll",
                                "'lL",
                                "'l",
                                "'r",
                                "'v",
                                "'ve",
                                "'",
                                "a'",
                                "don't",
                                "I'M",
                                "we'd'",
                                "12345678",
                                "\xD9\xA3\xD9\xA3\xD9\xA3\xD9\xA3",
                                " ",
                                "  ",
                                "  x",
                                "\n",
                                "\r\n",
                                " \n \n  ",
                                "\n\n x",
                                "a  \n",
                                "x \xE3\x80\x80y",
                                "!!!\n\n",
                                " !x",
                                " (hello",
                                "((x",
                                "\t!",
                                "\xE2\x80\xA8",
                                "\xC2\x85z",
                                "\xE1\xA0\x8E"
                                "a"}) {
    EXPECT_EQ(ByFastSplit(*fast, text), ByRegex(**regex, text)) << "text '" << text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Patterns, FastSplitTest, ::testing::Values(kLlama3, kQwen));

TEST(FastSplit, OnlyForTheKnownPatterns) {
  EXPECT_FALSE(FastSplit::ForPattern(R"(\p{N}{1,3})").has_value());
  EXPECT_FALSE(FastSplit::ForPattern(std::string(kLlama3) + "x").has_value());
}

}  // namespace
}  // namespace kvindex::tokenize
