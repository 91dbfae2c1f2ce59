// PrefixCache: re-tokenizing a prompt that extends one seen before (the
// next turn of a conversation) costs about the new text only, and gives the
// same ids as Tokenizer::Encode.
//
// Each cached prompt keeps its ids and its checkpoints (Tokenizer::
// EncodeBody): points where encoding can resume whatever text follows, as
// long as the text is unchanged a margin past them. A new prompt takes the
// cached prompt sharing its longest prefix, resumes at the last checkpoint
// at least resume_margin() bytes before the first differing byte, and
// encodes only the rest. Bounded: at most max_entries prompts and max_bytes
// of text + ids, least recently used out first; a prompt that extends a
// cached one replaces it. Thread-safe (one mutex around the lookup and the
// insertion; the encoding runs outside it).
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "shared/base/status.h"
#include "shared/tokenize/tokenizer.h"

namespace kvindex::tokenize {

class PrefixCache {
 public:
  struct Options {
    size_t max_entries = 256;
    size_t max_bytes = size_t{64} << 20;
  };
  struct Stats {
    uint64_t hits = 0;           // lookups that resumed from a cached prompt
    uint64_t misses = 0;         // lookups encoded from the start
    uint64_t bytes_reused = 0;   // text bytes not encoded again
    uint64_t bytes_encoded = 0;  // text bytes encoded
    uint64_t evictions = 0;
    size_t entries = 0;
    size_t bytes = 0;
  };

  PrefixCache(const Tokenizer* tokenizer, Options options);

  // Same result as tokenizer->Encode(text, add_special_tokens).
  StatusOr<std::vector<uint32_t>> Encode(std::string_view text, bool add_special_tokens = true);

  Stats stats() const;

 private:
  struct Entry {
    std::string text;
    std::vector<uint32_t> ids;  // body ids (no post-processor tokens)
    std::vector<Checkpoint> checkpoints;
    size_t Bytes() const {
      return text.size() + ids.size() * sizeof(uint32_t) + checkpoints.size() * sizeof(Checkpoint);
    }
  };

  const Tokenizer* const tokenizer_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::tokenize
