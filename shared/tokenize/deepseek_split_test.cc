// DeepSeekSplit against PCRE2 (the reference it replaces): the same matches
// and gaps for DeepSeek V3's three split patterns on seeded random text
// mixing every class the patterns distinguish, and on hand-picked cases.
#include "shared/tokenize/deepseek_split.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "shared/tokenize/regex.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

Spans ByRegex(const Regex& regex, std::string_view text) {
  Spans spans;
  EXPECT_TRUE(
      regex.ForEachMatch(text,
                         [&](size_t start, size_t end) {
                           spans.push_back({start, end});
                         })
          .ok());
  return spans;
}

Spans ByDeepSeekSplit(const DeepSeekSplit& split, std::string_view text) {
  Spans spans;
  for (size_t pos = 0, start, end; split.Find(text, pos, &start, &end); pos = end) {
    EXPECT_GT(end, start);
    EXPECT_GE(start, pos);
    if (end <= start) break;
    spans.push_back({start, end});
  }
  return spans;
}

// Code points of every class the patterns tell apart: ASCII letters, digits,
// punctuation and symbols (the first alternative's list), \r \n and spaces,
// Unicode spaces (U+180E is not White_Space), letters, marks (Mn, Mc, Me),
// numbers (Nd, Nl, No), punctuation and symbols outside ASCII, the CJK
// ranges and their neighbours, controls, format characters, private use,
// unassigned, emoji.
const std::vector<char32_t> kAlphabet = {
    'a',    'Z',    'q',    '0',     '5',     '9',     '!',      '"',    '#',    '$',
    '\'',   '(',    '-',    '.',     '/',     ':',     '@',      '[',    '\\',   ']',
    '^',    '_',    '`',    '{',     '|',     '~',     '+',      '<',    ' ',    ' ',
    ' ',    '\t',   '\r',   '\n',    '\n',    '\v',    '\f',     0x01,   0x7F,   0xE9,
    0x301,  0x903,  0x20DD, 0x5D0,   0x627,   0x416,   0x660,    0x2160, 0x2460, 0xBD,
    0xFF11, 0x3000, 0xA0,   0x85,    0x2028,  0x2029,  0x202F,   0x180E, 0x200B, 0x200D,
    0xFEFF, 0xA7,   0xBF,   0x2014,  0x201C,  0x3001,  0xFF01,   0xA9,   0x20AC, 0x2192,
    0x4E00, 0x4E2D, 0x9FA5, 0x9FA6,  0x3040,  0x3042,  0x309F,   0x30A0, 0x30A2, 0x30FF,
    0x3100, 0x303F, 0xAC00, 0x1F600, 0x1F469, 0x1D400, 0x10FFFD, 0xE000, 0x378,  0x1F1FA};

std::string RandomText(std::mt19937_64& rng) {
  std::string text;
  std::uniform_int_distribution<size_t> length(1, 40);
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::uniform_int_distribution<int> run(1, 5);
  for (size_t n = length(rng); text.size() < 4 * n;) {
    char32_t cp = kAlphabet[pick(rng)];
    for (int r = run(rng); r > 0; --r) AppendUtf8(cp, &text);  // runs exercise the repeats
    if (text.size() > 200) break;
  }
  return text;
}

class DeepSeekSplitTest : public ::testing::TestWithParam<std::string_view> {};

TEST_P(DeepSeekSplitTest, EqualsPcre2OnRandomText) {
  auto regex = Regex::Compile(GetParam());
  ASSERT_TRUE(regex.ok());
  auto split = DeepSeekSplit::ForPattern(GetParam());
  ASSERT_TRUE(split.has_value());
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 5000; ++i) {
      std::string text = RandomText(rng);
      ASSERT_EQ(ByDeepSeekSplit(*split, text), ByRegex(**regex, text))
          << "seed " << seed << " text '" << text << "'";
    }
  }
}

TEST_P(DeepSeekSplitTest, EqualsPcre2OnEdgeCases) {
  auto regex = Regex::Compile(GetParam());
  ASSERT_TRUE(regex.ok());
  auto split = DeepSeekSplit::ForPattern(GetParam());
  ASSERT_TRUE(split.has_value());
  for (std::string_view text : {"",
                                "1234567",
                                "a1b22c333d4444",
                                "\xD9\xA3\xD9\xA3\xD9\xA3\xD9\xA3",
                                "'s don't .NET #include <x>",
                                "x.y",
                                ".\xC3\xA9t\xC3\xA9",
                                "\xCC\x81",
                                "a\xCC\x81\xCC\x81"
                                "b",
                                "1abc",
                                "\x01word",
                                "\nword",
                                "\tword",
                                " word",
                                "  word",
                                " ...\r\n\r\nx",
                                " . ",
                                "!!!",
                                " \n \n  ",
                                "\n\n x",
                                "a  \n",
                                "  ",
                                " ",
                                "x \xE3\x80\x80y",
                                "\xE2\x80\xA8",
                                "\xE1\xA0\x8E"
                                "a",
                                "\xE4\xB8\xAD\xE6\x96\x87\xE3\x81\x82\xE3\x82\xA2"
                                "abc",
                                "\xE9\xBE\xA5\xE9\xBE\xA6",
                                "\xEF\xBB\xBF"
                                "x",
                                "\xF0\x9F\x98\x80 \xF0\x9F\x98\x80x"}) {
    EXPECT_EQ(ByDeepSeekSplit(*split, text), ByRegex(**regex, text)) << "text '" << text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Patterns, DeepSeekSplitTest,
                         ::testing::Values(DeepSeekSplit::kDigitsPattern,
                                           DeepSeekSplit::kCjkPattern,
                                           DeepSeekSplit::kWordsPattern));

TEST(DeepSeekSplit, OnlyForTheKnownPatterns) {
  EXPECT_FALSE(DeepSeekSplit::ForPattern(R"(\p{N}{1,2})").has_value());
  EXPECT_FALSE(
      DeepSeekSplit::ForPattern(std::string(DeepSeekSplit::kWordsPattern) + "x").has_value());
}

}  // namespace
}  // namespace kvindex::tokenize
