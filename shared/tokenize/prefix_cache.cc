#include "shared/tokenize/prefix_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvindex::tokenize {
namespace {

// Length of the common prefix of a[0, n) and b[0, n), eight bytes at a time.
size_t CommonPrefix(const char* a, const char* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    if (x != y) {
      const uint64_t d = x ^ y;  // the first differing byte: the lowest in memory order
      const int bit =
          std::endian::native == std::endian::little ? std::countr_zero(d) : std::countl_zero(d);
      return i + static_cast<size_t>(bit) / 8;
    }
  }
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

PrefixCache::PrefixCache(const Tokenizer* tokenizer, Options options)
    : tokenizer_(tokenizer), options_(options) {}

StatusOr<std::vector<uint32_t>> PrefixCache::Encode(std::string_view text,
                                                    bool add_special_tokens) {
  std::vector<uint32_t> body;
  std::vector<Checkpoint> checkpoints;
  size_t resume = 0;    // byte offset encoding resumes at
  bool inside = false;  // ... inside a piece of plain text (Checkpoint::inside)
  const std::string* replaced = nullptr;
  {
    absl::MutexLock lock(&mu_);
    const size_t margin = tokenizer_->resume_margin();
    auto best = lru_.end();
    size_t best_common = 0;
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      const std::string& cached = it->text;
      const size_t limit = std::min(cached.size(), text.size());
      if (limit <= best_common || limit == 0 || cached[0] != text[0]) continue;
      const size_t common = CommonPrefix(cached.data(), text.data(), limit);
      if (common > best_common) {
        best_common = common;
        best = it;
      }
    }
    if (best != lru_.end()) {
      const Entry& entry = *best;
      if (best_common == entry.text.size() && best_common == text.size()) {
        // The same prompt again.
        body = entry.ids;
        checkpoints = entry.checkpoints;
        resume = text.size();
      } else if (best_common >= margin) {
        // Last checkpoint with offset + margin <= common.
        const size_t bound = best_common - margin;
        auto cp =
            std::upper_bound(entry.checkpoints.begin(), entry.checkpoints.end(), bound,
                             [](size_t offset, const Checkpoint& c) { return offset < c.offset; });
        if (cp != entry.checkpoints.begin()) {
          --cp;
          resume = cp->offset;
          inside = cp->inside;
          body.assign(entry.ids.begin(), entry.ids.begin() + cp->ids);
          checkpoints.assign(entry.checkpoints.begin(), cp + 1);
        }
      }
      if (resume > 0) {
        lru_.splice(lru_.begin(), lru_, best);
        if (best_common == best->text.size()) replaced = &best->text;
      }
    }
    if (resume > 0) {
      ++stats_.hits;
      stats_.bytes_reused += resume;
    } else {
      ++stats_.misses;
    }
    stats_.bytes_encoded += text.size() - resume;
  }

  if (resume < text.size()) {
    const size_t first_id = body.size();
    std::vector<Checkpoint> tail;
    KVINDEX_RETURN_IF_ERROR(
        tokenizer_->EncodeBody(text.substr(resume), &body, resume == 0, &tail, inside));
    for (Checkpoint c : tail) {
      checkpoints.push_back({static_cast<uint32_t>(c.offset + resume),
                             static_cast<uint32_t>(c.ids + first_id), c.inside});
    }
  }

  std::vector<uint32_t> ids;
  if (add_special_tokens) {
    ids.reserve(body.size() + tokenizer_->prefix_ids().size() + tokenizer_->suffix_ids().size());
    ids = tokenizer_->prefix_ids();
  }
  ids.insert(ids.end(), body.begin(), body.end());
  if (add_special_tokens) {
    ids.insert(ids.end(), tokenizer_->suffix_ids().begin(), tokenizer_->suffix_ids().end());
  }

  Entry entry{std::string(text), std::move(body), std::move(checkpoints)};
  if (entry.Bytes() > options_.max_bytes || options_.max_entries == 0) return ids;
  absl::MutexLock lock(&mu_);
  // The prompt this one extends is superseded (it is a prefix of the new
  // entry): drop it. Compared by content, another thread may have moved it.
  if (replaced != nullptr) {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->text.size() < text.size() && text.starts_with(it->text)) {
        stats_.bytes -= it->Bytes();
        lru_.erase(it);
        break;
      }
    }
  }
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->text == text) {  // already cached (same prompt twice)
      lru_.splice(lru_.begin(), lru_, it);
      return ids;
    }
  }
  stats_.bytes += entry.Bytes();
  lru_.push_front(std::move(entry));
  while (lru_.size() > options_.max_entries || stats_.bytes > options_.max_bytes) {
    stats_.bytes -= lru_.back().Bytes();
    lru_.pop_back();
    ++stats_.evictions;
  }
  return ids;
}

PrefixCache::Stats PrefixCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.entries = lru_.size();
  return s;
}

}  // namespace kvindex::tokenize
