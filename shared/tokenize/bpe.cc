#include "shared/tokenize/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "shared/tokenize/internal/short_word_cache.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
// others for U+0100 + n in byte order. Returns code point -> byte (or -1).
absl::flat_hash_map<char32_t, int> ByteLevelDecoder() {
  absl::flat_hash_map<char32_t, int> decode;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) {
      decode[static_cast<char32_t>(b)] = b;
    } else {
      decode[static_cast<char32_t>(256 + n)] = b;
      ++n;
    }
  }
  return decode;
}

// Maps a vocabulary string from GPT-2's alphabet back to bytes; false if it
// holds a character outside the alphabet (no byte-level input can reach it).
bool ToRawBytes(const absl::flat_hash_map<char32_t, int>& decode, std::string_view token,
                std::string* out) {
  out->clear();
  for (size_t i = 0, len = 0; i < token.size(); i += len) {
    auto it = decode.find(DecodeUtf8(token, i, &len));
    if (it == decode.end()) return false;
    out->push_back(static_cast<char>(it->second));
  }
  return true;
}

// The last code point of non-empty valid UTF-8 `text`.
char32_t LastCodePoint(std::string_view text) {
  size_t last = text.size() - 1;
  while (last > 0 && (static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) --last;
  size_t len = 0;
  return DecodeUtf8(text, last, &len);
}

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

struct HeapEntry {
  uint32_t rank;
  uint32_t pos;
  uint32_t new_id;
  // std heap is a max-heap: "less" = later to pop = higher rank, then higher pos.
  bool operator<(const HeapEntry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

StatusOr<Bpe> Bpe::FromJson(const nlohmann::json& model, bool byte_level) {
  if (model.value("type", std::string("BPE")) != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("unsupported model type ", model.value("type", std::string())));
  }
  if (!model.value("dropout", nlohmann::json()).is_null()) {
    return absl::UnimplementedError(
        "BPE dropout is not supported (ids would not be deterministic)");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto value = model.value(affix, nlohmann::json());
    if (!value.is_null() && !value.get<std::string>().empty()) {
      return absl::UnimplementedError(absl::StrCat("BPE ", affix, " is not supported"));
    }
  }
  Bpe bpe;
  // Not the object's address: a later Bpe may be built where a destroyed
  // one was, and must not be served that one's cached words.
  static std::atomic<uint64_t> next_cache_id{1};
  bpe.cache_id_ = next_cache_id.fetch_add(1, std::memory_order_relaxed);
  bpe.byte_level_ = byte_level;
  bpe.ignore_merges_ = model.value("ignore_merges", false);
  bpe.byte_fallback_ = model.value("byte_fallback", false);
  bpe.fuse_unk_ = model.value("fuse_unk", false);
  bpe.byte_ids_.fill(kNone);
  bpe.fallback_ids_.fill(kNone);

  const auto& vocab = model.at("vocab");
  if (!vocab.is_object()) return absl::InvalidArgumentError("BPE vocab is not an object");
  absl::flat_hash_map<std::string, uint32_t> file_vocab;
  file_vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) file_vocab[token] = id.get<uint32_t>();
  bpe.file_vocab_size_ = file_vocab.size();

  auto unk = model.value("unk_token", nlohmann::json());
  if (!unk.is_null()) {
    auto it = file_vocab.find(unk.get<std::string>());
    if (it != file_vocab.end()) bpe.unk_id_ = it->second;
  }
  if (bpe.byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = file_vocab.find(name);
      if (it != file_vocab.end()) bpe.fallback_ids_[b] = it->second;
    }
  }

  // Merges: "a b" strings or [a, b] pairs; rank = position, a later duplicate
  // wins (as HF's map insertion does).
  const auto& merges = model.at("merges");
  bpe.merges_.reserve(merges.size());
  std::string left, right;
  // Last characters of the left sides of merges whose right side starts
  // with "▁" (split_at_metaspace_).
  absl::flat_hash_set<char32_t> joins_metaspace;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& merge = merges[rank];
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("BPE merge '", line, "' is not two tokens"));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError("BPE merge is neither a string nor a pair");
    }
    auto a = file_vocab.find(left);
    auto b = file_vocab.find(right);
    auto joined = file_vocab.find(left + right);
    if (a == file_vocab.end() || b == file_vocab.end() || joined == file_vocab.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("BPE merge '", left, " ", right, "' uses a token not in the vocabulary"));
    }
    bpe.merges_[(uint64_t{a->second} << 32) | b->second] =
        MergeValue{static_cast<uint32_t>(rank), joined->second};
    if (!byte_level && right.starts_with(kMetaspace) && !left.empty()) {
      joins_metaspace.insert(LastCodePoint(left));
    }
  }
  if (!byte_level && !bpe.ignore_merges_ && file_vocab.contains(std::string(kMetaspace))) {
    bpe.split_at_metaspace_ = true;
    bpe.safe_before_metaspace_.assign((kCodePoints + 63) / 64, 0);
    // A character outside the vocabulary becomes <0xXX> tokens or the unk
    // token: the last character of those strings.
    // It must not be dropped either (no <0xXX> for a byte and no unk):
    // what precedes it would then meet the "▁".
    bool unknown_safe = !joins_metaspace.contains(U'>');
    if (bpe.unk_id_ != kNone) {
      const std::string& name = unk.get_ref<const std::string&>();
      unknown_safe =
          unknown_safe && (name.empty() || !joins_metaspace.contains(LastCodePoint(name)));
    } else {
      bool every_byte = bpe.byte_fallback_;
      for (uint32_t id : bpe.fallback_ids_) every_byte = every_byte && id != kNone;
      unknown_safe = unknown_safe && every_byte;
    }
    std::string ch;
    for (char32_t cp = 0; cp < kCodePoints; ++cp) {
      if (joins_metaspace.contains(cp) || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
      ch.clear();
      AppendUtf8(cp, &ch);
      if (unknown_safe || file_vocab.contains(ch)) {
        bpe.safe_before_metaspace_[cp >> 6] |= uint64_t{1} << (cp & 63);
      }
    }
  }

  if (byte_level) {
    auto decode = ByteLevelDecoder();
    std::string raw;
    bpe.vocab_.reserve(file_vocab.size());
    for (const auto& [token, id] : file_vocab) {
      if (!ToRawBytes(decode, token, &raw)) {
        bpe.unmapped_[token] = id;
        continue;
      }
      bpe.vocab_[raw] = id;
      if (raw.size() == 1) bpe.byte_ids_[static_cast<unsigned char>(raw[0])] = id;
    }
  } else {
    bpe.vocab_ = std::move(file_vocab);
  }
  return bpe;
}

bool Bpe::FindToken(std::string_view token, uint32_t* id) const {
  std::string raw(token);
  if (byte_level_) {
    static const auto* decode = new absl::flat_hash_map<char32_t, int>(ByteLevelDecoder());
    if (!ToRawBytes(*decode, token, &raw)) {
      auto it = unmapped_.find(std::string(token));
      if (it == unmapped_.end()) return false;
      *id = it->second;
      return true;
    }
  }
  auto it = vocab_.find(raw);
  if (it == vocab_.end()) return false;
  *id = it->second;
  return true;
}

namespace {

// Words seen recently on this thread and their ids (HF keeps a word cache
// too): most pre-tokens repeat. Per thread, so no locking; cleared when the
// tokenizer changes or it holds kMaxWords words.
struct WordCache {
  uint64_t owner = 0;                    // Bpe::cache_id_ of the vocabulary the words belong to
  internal::ShortWordCache short_words;  // the common case, checked first
  absl::flat_hash_map<std::string, std::vector<uint32_t>> words;
};
constexpr size_t kMaxWords = 1 << 16;
constexpr size_t kMaxCachedWordBytes = 64;

}  // namespace

bool Bpe::SafeBeforeMetaspace(std::string_view word, size_t i) const {
  const auto last = static_cast<unsigned char>(word[i - 1]);
  return SafeBeforeMetaspace(last < 0x80 ? char32_t{last} : LastCodePoint(word.substr(0, i)));
}

void Bpe::Encode(std::string_view word, std::vector<uint32_t>* ids) const {
  if (!split_at_metaspace_) return EncodeCached(word, ids);
  size_t start = 0;
  for (size_t i = word.find(kMetaspace, 1); i != std::string_view::npos;
       i = word.find(kMetaspace, i + kMetaspace.size())) {
    if (!SafeBeforeMetaspace(word, i)) continue;
    EncodeCached(word.substr(start, i - start), ids);
    start = i;
  }
  EncodeCached(word.substr(start), ids);
}

void Bpe::EncodeCached(std::string_view word, std::vector<uint32_t>* ids) const {
  if (word.empty()) return;
  thread_local WordCache cache;
  if (cache.owner != cache_id_) {
    cache.short_words.Clear();
    cache.words.clear();
    cache.owner = cache_id_;
  }
  if (cache.short_words.Find(word, ids)) return;
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    auto hit = cache.words.find(absl::string_view(word.data(), word.size()));
    if (hit != cache.words.end()) {
      ids->insert(ids->end(), hit->second.begin(), hit->second.end());
      cache.short_words.Put(word, hit->second.data(), hit->second.size());
      return;
    }
  }
  const size_t first = ids->size();
  EncodeUncached(word, ids);
  cache.short_words.Put(word, ids->data() + first, ids->size() - first);
  if (cacheable) {
    if (cache.words.size() >= kMaxWords) cache.words.clear();
    cache.words.emplace(std::string(word), std::vector<uint32_t>(ids->begin() + first, ids->end()));
  }
}

void Bpe::EncodeUncached(std::string_view word, std::vector<uint32_t>* ids) const {
  if (ignore_merges_) {
    auto it = vocab_.find(absl::string_view(word.data(), word.size()));
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  thread_local std::vector<uint32_t> symbols;
  symbols.clear();
  if (byte_level_) {
    for (unsigned char b : word) {
      uint32_t id = byte_ids_[b];
      // Every byte is in a byte-level vocabulary; a file without one drops
      // the byte as HF does for an unknown character without unk.
      if (id != kNone) symbols.push_back(id);
    }
  } else {
    bool unk_pending = false;
    for (size_t i = 0; i < word.size();) {
      size_t len = Utf8Length(static_cast<unsigned char>(word[i]));
      std::string_view ch = word.substr(i, len);
      i += len;
      auto it = vocab_.find(absl::string_view(ch.data(), ch.size()));
      if (it != vocab_.end()) {
        if (unk_pending) {
          symbols.push_back(unk_id_);
          unk_pending = false;
        }
        symbols.push_back(it->second);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : ch) all = all && fallback_ids_[b] != kNone;
        if (all) {
          // HF adds the byte tokens before a pending unk (kept as it is).
          for (unsigned char b : ch) symbols.push_back(fallback_ids_[b]);
          continue;
        }
      }
      if (unk_id_ != kNone) {
        if (unk_pending && !fuse_unk_) symbols.push_back(unk_id_);
        unk_pending = true;
      }
    }
    if (unk_pending) symbols.push_back(unk_id_);
  }
  MergeAll(&symbols, ids);
}

void Bpe::MergeAll(std::vector<uint32_t>* symbols, std::vector<uint32_t>* ids) const {
  std::vector<uint32_t>& sym = *symbols;
  const size_t n = sym.size();
  if (n == 0) return;
  if (n == 1) {
    ids->push_back(sym[0]);
    return;
  }
  // Linked symbols: next[i] / prev[i], alive[i]; heap of candidate merges.
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<HeapEntry> heap;
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    if (const MergeValue* m = FindMerge(sym[i], sym[i + 1])) {
      heap.push_back({m->rank, static_cast<uint32_t>(i), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  constexpr uint32_t kDead = UINT32_MAX;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    HeapEntry top = heap.back();
    heap.pop_back();
    uint32_t pos = top.pos;
    if (sym[pos] == kDead || next[pos] < 0) continue;
    auto right = static_cast<uint32_t>(next[pos]);
    const MergeValue* m = FindMerge(sym[pos], sym[right]);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    sym[pos] = top.new_id;
    sym[right] = kDead;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = static_cast<int32_t>(pos);
    if (prev[pos] >= 0) {
      auto p = static_cast<uint32_t>(prev[pos]);
      if (const MergeValue* pm = FindMerge(sym[p], sym[pos])) {
        heap.push_back({pm->rank, p, pm->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (next[pos] >= 0) {
      if (const MergeValue* nm = FindMerge(sym[pos], sym[next[pos]])) {
        heap.push_back({nm->rank, pos, nm->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = next[i]) ids->push_back(sym[i]);
}

}  // namespace kvindex::tokenize
