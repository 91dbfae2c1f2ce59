// AddedVocabulary: the added and special tokens of tokenizer.json, cut out
// of the text before normalization (normalized = false) or after it
// (normalized = true), as Hugging Face's AddedVocabulary does: leftmost-
// longest matching, single_word tokens only between non-word characters,
// lstrip / rstrip swallowing the whitespace beside a match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/tokenize/pre_tokenizer.h"

namespace kvindex::tokenize {

struct AddedToken {
  uint32_t id;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// One side (raw or normalized) of the added vocabulary: a byte trie.
class AddedTokenMatcher {
 public:
  // `patterns[i]` is matched for tokens[i] (the normalized content for
  // normalized tokens).
  void Build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  struct Segment {
    size_t start, end;
    int64_t id;           // -1: plain text
    bool rstrip = false;  // the token swallowed the whitespace after it
  };
  // Longest token pattern in bytes.
  size_t max_bytes() const { return max_bytes_; }
  // Cuts `text` into plain text and added tokens (HF's find_matches).
  void Split(std::string_view text, std::vector<Segment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_
  };
  int32_t Child(int32_t node, unsigned char b) const;
  // Longest token starting at text[pos]: its index, or -1; *len its length.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* len) const;

  std::vector<Node> nodes_;
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
  // The first byte every pattern shares, if they share one (the "<" of
  // "<|...|>" tokens): the scan is then a memchr.
  int shared_first_byte_ = -1;
  size_t max_bytes_ = 0;
};

}  // namespace kvindex::tokenize
