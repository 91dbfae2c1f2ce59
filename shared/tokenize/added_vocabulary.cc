#include "shared/tokenize/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstring>

#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

// Rust regex's Unicode \w (letters, marks, decimal digits, connector
// punctuation), by general category.
bool IsWordChar(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return c == 0x200C || c == 0x200D;
  }
}

size_t PreviousCharStart(std::string_view text, size_t end) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
  return p;
}

}  // namespace

void AddedTokenMatcher::Build(const std::vector<AddedToken>& tokens,
                              const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  tokens_ = tokens;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;
    max_bytes_ = std::max(max_bytes_, pattern.size());
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
    int32_t node = 0;
    for (unsigned char b : pattern) {
      int32_t child = Child(node, b);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        auto& children = nodes_[node].children;
        auto at = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{0}));
        children.insert(at, {b, child});
        nodes_.push_back(Node{});
      }
      node = child;
    }
    // Two tokens with the same content: the first keeps it (HF's map keeps
    // one id per content).
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
  shared_first_byte_ = -1;
  for (int b = 0; b < 256; ++b) {
    if (!first_byte_[b]) continue;
    if (shared_first_byte_ >= 0) {
      shared_first_byte_ = -1;
      break;
    }
    shared_first_byte_ = b;
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, unsigned char b) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{0}));
  return it != children.end() && it->first == b ? it->second : -1;
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *len = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (shared_first_byte_ >= 0) {
      const void* hit = std::memchr(text.data() + pos, shared_first_byte_, text.size() - pos);
      if (hit == nullptr) break;
      pos = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
    } else if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    int32_t t = LongestAt(text, pos, &len);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    size_t start = pos, stop = pos + len;
    pos = stop;  // the matcher resumes after the match, whatever strip does
    size_t cl = 0;
    if (token.single_word) {
      bool start_ok =
          start == 0 || !IsWordChar(DecodeUtf8(text, PreviousCharStart(text, start), &cl));
      bool stop_ok = stop == text.size() || !IsWordChar(DecodeUtf8(text, stop, &cl));
      if (!start_ok || !stop_ok) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t p = PreviousCharStart(text, s);
        if (!IsUnicodeWhitespace(DecodeUtf8(text, p, &cl))) break;
        s = p;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size() && IsUnicodeWhitespace(DecodeUtf8(text, stop, &cl))) stop += cl;
    }
    if (start > start_offset) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, token.id, token.rstrip});
    start_offset = stop;
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

}  // namespace kvindex::tokenize
