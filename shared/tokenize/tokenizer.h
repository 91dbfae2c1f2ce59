// Tokenizer: a model's Hugging Face tokenizer.json (+ tokenizer_config.json)
// loaded once and encoding text into exactly the ids Hugging Face's
// `tokenizers` gives (Tokenizer.encode with its defaults):
//
//   text -> added tokens cut out (normalized = false) -> normalizer per piece
//        -> added tokens cut out (normalized = true) -> pre-tokenizer -> BPE
//        -> post-processor (BOS and the like, when add_special_tokens)
//
// Supported families and what falls back: docs/tokenize.md. A file using a
// component we do not implement fails Load with an Unimplemented status
// naming it, so callers fall back instead of hashing wrong ids. Encode is
// const and safe to call from many threads.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "nlohmann/json_fwd.hpp"
#include "shared/base/status.h"
#include "shared/tokenize/added_vocabulary.h"
#include "shared/tokenize/bpe.h"
#include "shared/tokenize/normalizer.h"
#include "shared/tokenize/pre_tokenizer.h"

namespace kvindex::tokenize {

class ChatEncoder;

// A point of a text where encoding can resume: the ids of text[0, offset)
// are the first `ids` ids of the whole text's, whatever follows, provided
// the text is unchanged up to offset + Tokenizer::resume_margin(); the rest
// is EncodeBody(text.substr(offset), ..., at_start = false, ..., inside).
// `inside`: the point is inside a piece of plain text (not right after an
// added token), so the normalizer's Prepend does not apply there.
struct Checkpoint {
  uint32_t offset;
  uint32_t ids;
  bool inside = false;
};

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json.
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);
  // From the files' contents (`config_json` may be empty).
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                       std::string_view config_json);

  // The ids of `text`; InvalidArgument (with the byte offset) if `text` is not
  // valid UTF-8 (Hugging Face's API only takes valid strings).
  StatusOr<std::vector<uint32_t>> Encode(std::string_view text,
                                         bool add_special_tokens = true) const;

  // The ids of `text` without the post-processor, appended to *ids. The
  // prefix cache resumes with it: `at_start` = text begins the prompt;
  // *checkpoints (nullable) gets the points where encoding may resume,
  // offsets relative to `text`, id counts relative to ids->size() on entry.
  // Checkpoints: the end of each added token (without rstrip); for
  // byte-level tokenizers without normalizer whose split patterns are known
  // not to carry a pre-token across "\n" + non-space (Llama 3, Qwen,
  // DeepSeek, GPT-2), the start of each such line; for SentencePiece-style
  // models whose normalizer maps text character by character, " " to "▁"
  // (Llama 2, Gemma 3), a space after a non-space character c where no merge
  // joins c's image to "▁" (the cut Bpe makes itself), at least
  // kCheckpointSpacing bytes after the previous one. `inside`: `text`
  // resumes at an `inside` checkpoint.
  Status EncodeBody(std::string_view text, std::vector<uint32_t>* ids, bool at_start = true,
                    std::vector<Checkpoint>* checkpoints = nullptr, bool inside = false) const;
  static constexpr size_t kCheckpointSpacing = 64;
  // Bytes of unchanged text a checkpoint needs after it (longest added token).
  size_t resume_margin() const { return resume_margin_; }
  // The ids the post-processor puts before and after the body.
  const std::vector<uint32_t>& prefix_ids() const { return prefix_ids_; }
  const std::vector<uint32_t>& suffix_ids() const { return suffix_ids_; }

  // tokenizer_config.json's chat_template ("" if none) and its bos/eos tokens.
  const std::string& chat_template() const { return chat_template_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // The chat template, parsed at load (chat_encoder.h); null when the model
  // has none or it does not parse, chat_status() then says why
  // (FailedPrecondition / Unimplemented: render elsewhere).
  const ChatEncoder* chat() const { return chat_.get(); }
  const Status& chat_status() const { return chat_status_; }

  ~Tokenizer();

 private:
  Tokenizer() = default;
  Status LoadPostProcessor(const nlohmann::json& spec);
  // Sets space_checkpoints_ and image_last_ (EncodeBody's comment).
  void InitSpaceCheckpoints();
  struct Resume {
    const char* base;  // start of the caller's text
    size_t first_id;   // ids->size() on entry
    std::vector<Checkpoint>* out;
  };
  Status EncodePlain(std::string_view piece, bool at_start, std::vector<uint32_t>* ids,
                     const Resume* resume) const;
  Status EncodeNormalized(std::string_view piece, bool at_start, bool inside,
                          std::vector<uint32_t>* ids, const Resume* resume) const;
  // EncodeNormalized for space_checkpoints_: `piece` cut at the checkpoints,
  // each part normalized and encoded on its own (same ids).
  Status EncodeInParts(std::string_view piece, bool at_start, bool inside,
                       std::vector<uint32_t>* ids, const Resume* resume) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<Bpe> bpe_;
  AddedTokenMatcher raw_added_;         // normalized = false
  AddedTokenMatcher normalized_added_;  // normalized = true
  std::vector<uint32_t> prefix_ids_, suffix_ids_;
  size_t resume_margin_ = 4;
  bool line_checkpoints_ = false;
  bool space_checkpoints_ = false;
  // space_checkpoints_: the last code point of the image of each character
  // the normalizer changes.
  absl::flat_hash_map<char32_t, char32_t> image_last_;
  std::string chat_template_, bos_token_, eos_token_;
  std::unique_ptr<const ChatEncoder> chat_;
  Status chat_status_ = absl::FailedPreconditionError("no tokenizer_config.json chat_template");
};

}  // namespace kvindex::tokenize
