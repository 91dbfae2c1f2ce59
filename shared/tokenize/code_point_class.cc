#include "shared/tokenize/code_point_class.h"

#include <cstdlib>
#include <map>
#include <string>

#include "shared/tokenize/regex.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

constexpr char32_t kCodePoints = 0x110000;

// Marks every code point inside a match of `pattern` (a run of one class)
// over `all`, the UTF-8 text of every scalar value in order.
void MarkMatches(const char* pattern, const std::string& all, CharClass mark,
                 std::vector<uint8_t>* classes) {
  auto regex = Regex::Compile(pattern);
  if (!regex.ok()) std::abort();  // a fixed pattern: cannot fail
  Status status = (*regex)->ForEachMatch(all, [&](size_t start, size_t end) {
    for (size_t i = start, len = 0; i < end; i += len) {
      (*classes)[DecodeUtf8(all, i, &len)] = static_cast<uint8_t>(mark);
    }
  });
  if (!status.ok()) std::abort();
}

}  // namespace

const CodePointClasses& CodePointClasses::Get() {
  static const CodePointClasses* classes = new CodePointClasses(false);
  return *classes;
}

const CodePointClasses& CodePointClasses::GetDetailed() {
  static const CodePointClasses* classes = new CodePointClasses(true);
  return *classes;
}

CodePointClasses::CodePointClasses(bool detailed) {
  std::string all;
  all.reserve(4 * kCodePoints);
  for (char32_t cp = 0; cp < kCodePoints; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates: not in valid UTF-8
    AppendUtf8(cp, &all);
  }
  std::vector<uint8_t> classes(kCodePoints, static_cast<uint8_t>(CharClass::kOther));
  MarkMatches(R"(\p{L}+)", all, CharClass::kLetter, &classes);
  MarkMatches(R"(\p{N}+)", all, CharClass::kNumber, &classes);
  if (detailed) {
    MarkMatches(R"(\p{M}+)", all, CharClass::kMark, &classes);
    MarkMatches(R"(\p{P}+)", all, CharClass::kPunct, &classes);
    MarkMatches(R"(\p{S}+)", all, CharClass::kSymbol, &classes);
  }
  for (char32_t cp = 0; cp < kCodePoints; ++cp) {
    if (IsUnicodeWhitespace(cp)) classes[cp] = static_cast<uint8_t>(CharClass::kSpace);
  }
  for (char32_t cp = 0; cp < 0x80; ++cp) ascii_[cp] = classes[cp];
  // Two-stage table: most 256-code-point pages repeat (unassigned planes,
  // blocks of one script), so only distinct pages are kept.
  std::map<std::array<uint8_t, 256>, uint16_t> seen;
  page_of_.resize(kCodePoints >> 8);
  for (size_t page = 0; page < page_of_.size(); ++page) {
    std::array<uint8_t, 256> content;
    for (size_t i = 0; i < 256; ++i) content[i] = classes[(page << 8) | i];
    auto [it, inserted] = seen.emplace(content, static_cast<uint16_t>(pages_.size()));
    if (inserted) pages_.push_back(content);
    page_of_[page] = it->second;
  }
}

}  // namespace kvindex::tokenize
