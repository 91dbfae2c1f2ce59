// Bpe: the BPE model of tokenizer.json, exactly as Hugging Face's
// tokenizers runs it (model/bpe): a word starts as one symbol per character
// (per byte for byte-level models), unknown characters fall back to <0xXX>
// byte tokens or the (fused) unk token, then merges apply lowest rank first,
// leftmost on ties; with ignore_merges a word already in the vocabulary is
// one token.
//
// Byte-level models: the vocabulary is mapped back from GPT-2's printable
// byte alphabet to raw bytes at load, so words are raw UTF-8 slices and the
// symbols are bytes: no per-call re-encoding.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "nlohmann/json_fwd.hpp"
#include "shared/base/status.h"

namespace kvindex::tokenize {

class Bpe {
 public:
  // `model` is the JSON value of "model" (type BPE); `byte_level`: the
  // pre-tokenizer maps bytes to GPT-2's alphabet.
  static StatusOr<Bpe> FromJson(const nlohmann::json& model, bool byte_level);

  // Appends the ids of `word` (one pre-token) to *ids.
  void Encode(std::string_view word, std::vector<uint32_t>* ids) const;

  // Entries in tokenizer.json's vocabulary (HF's get_vocab_size).
  size_t vocab_size() const { return file_vocab_size_; }
  // The id of `token` written as in tokenizer.json (GPT-2's alphabet for
  // byte-level models).
  bool FindToken(std::string_view token, uint32_t* id) const;

  // SentencePiece-style models: Encode cuts a word before each "▁" that no
  // merge joins to the character before it (split_at_metaspace_ below).
  bool splits_at_metaspace() const { return split_at_metaspace_; }
  // splits_at_metaspace(): no merge joins code point `cp` to a "▁" after it.
  bool SafeBeforeMetaspace(char32_t cp) const {
    return cp < kCodePoints && ((safe_before_metaspace_[cp >> 6] >> (cp & 63)) & 1);
  }

 private:
  static constexpr char32_t kCodePoints = 0x110000;
  struct MergeValue {
    uint32_t rank;
    uint32_t new_id;
  };
  static constexpr uint32_t kNone = UINT32_MAX;
  // One word through the per-thread word caches, then EncodeUncached.
  void EncodeCached(std::string_view word, std::vector<uint32_t>* ids) const;
  // True if no merge can join the character ending at word[i] with the "▁"
  // starting there (see split_at_metaspace_).
  bool SafeBeforeMetaspace(std::string_view word, size_t i) const;
  void EncodeUncached(std::string_view word, std::vector<uint32_t>* ids) const;
  void MergeAll(std::vector<uint32_t>* symbols, std::vector<uint32_t>* ids) const;
  const MergeValue* FindMerge(uint32_t a, uint32_t b) const {
    auto it = merges_.find((uint64_t{a} << 32) | b);
    return it == merges_.end() ? nullptr : &it->second;
  }

  uint64_t cache_id_ = 0;  // names this vocabulary in the per-thread word caches
  bool byte_level_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  uint32_t unk_id_ = kNone;
  size_t file_vocab_size_ = 0;
  // Byte-level: vocabulary entries outside GPT-2's alphabet (special tokens
  // such as DeepSeek's <｜begin▁of▁sentence｜>), by their file string.
  absl::flat_hash_map<std::string, uint32_t> unmapped_;
  // Raw bytes (byte-level) or the file's strings (otherwise) -> id.
  absl::flat_hash_map<std::string, uint32_t> vocab_;
  std::array<uint32_t, 256> byte_ids_{};      // byte-level: the id of each single byte
  std::array<uint32_t, 256> fallback_ids_{};  // byte_fallback: the id of <0xXX>
  absl::flat_hash_map<uint64_t, MergeValue> merges_;
  // SentencePiece-style models (no pre-tokenizer: a whole text is one word):
  // a "▁" preceded by a character c starts an independent piece when no merge
  // (a, b) has a ending in c and b starting with "▁" (nor, for a character
  // not in the vocabulary, ending in '>', the end of <0xXX> and <unk>). No
  // merge then ever joins across that point, so BPE on the pieces, each
  // through the word cache, gives the ids of BPE on the whole word.
  bool split_at_metaspace_ = false;
  std::vector<uint64_t> safe_before_metaspace_;  // bit per code point
};

}  // namespace kvindex::tokenize
