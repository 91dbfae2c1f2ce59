// ShortWordCache: the ids of recently encoded short words (at most 16
// bytes, at most kMaxIds ids), direct-mapped on a multiply-shift hash of the
// word's bytes held in two machine words, so a hit costs a few loads and
// compares: no string hashing, no probing, no pointer to follow. Most
// pre-tokens of real text are short and repeat; a miss falls back to the
// general path (Bpe::Encode), which fills the slot. One per thread and
// owner (no locking); a colliding word simply replaces the slot. The slots
// (640 KB) are allocated on the heap when a thread first encodes.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace kvindex::tokenize::internal {

class ShortWordCache {
 public:
  static constexpr size_t kMaxBytes = 16;
  static constexpr size_t kMaxIds = 6;

  // Appends the cached ids of `word` to *ids and returns true, or false
  // (not cached, or not short).
  bool Find(std::string_view word, std::vector<uint32_t>* ids) const {
    if (word.size() > kMaxBytes || word.empty()) return false;
    Key key = KeyOf(word);
    const Slot& slot = slots_[SlotOf(key)];
    if (slot.generation != generation_ || slot.key.lo != key.lo || slot.key.hi != key.hi ||
        slot.key.len != key.len) {
      return false;
    }
    // At most kMaxIds: push_back inlines, a range insert calls memmove.
    for (uint8_t i = 0; i < slot.count; ++i) ids->push_back(slot.ids[i]);
    return true;
  }

  // Remembers `word` -> ids[0, count) if it fits.
  void Put(std::string_view word, const uint32_t* word_ids, size_t count) {
    if (word.size() > kMaxBytes || word.empty() || count == 0 || count > kMaxIds) return;
    Key key = KeyOf(word);
    Slot& slot = slots_[SlotOf(key)];
    slot.key = key;
    slot.generation = generation_;
    slot.count = static_cast<uint8_t>(count);
    std::memcpy(slot.ids.data(), word_ids, count * sizeof(uint32_t));
  }

  // Forgets every word: O(1), by moving to a new generation.
  void Clear() {
    if (++generation_ == 0) {  // wrapped: no slot may look current
      for (Slot& slot : slots_) slot.generation = 0;
      generation_ = 1;
    }
  }

 private:
  static constexpr int kSlotBits = 14;
  struct Key {
    uint64_t lo = 0, hi = 0;
    uint8_t len = 0;
  };
  struct Slot {
    Key key;
    uint32_t generation = 0;  // valid iff equal to the cache's
    uint8_t count = 0;
    std::array<uint32_t, kMaxIds> ids;
  };

  // The word's bytes in two machine words, with fixed-size (overlapping)
  // loads rather than a variable-length copy (a libc call per word). With
  // the length, the loads determine the word: 8-16 bytes = its first and
  // last 8; 4-7 = its first and last 4; 1-3 = its first, middle, last byte.
  static Key KeyOf(std::string_view word) {
    Key key;
    const size_t n = word.size();
    const char* p = word.data();
    key.len = static_cast<uint8_t>(n);
    if (n >= 8) {
      std::memcpy(&key.lo, p, 8);
      std::memcpy(&key.hi, p + n - 8, 8);
    } else if (n >= 4) {
      uint32_t a, b;
      std::memcpy(&a, p, 4);
      std::memcpy(&b, p + n - 4, 4);
      key.lo = (uint64_t{b} << 32) | a;
    } else {
      key.lo = static_cast<unsigned char>(p[0]) |
               (uint64_t{static_cast<unsigned char>(p[n / 2])} << 8) |
               (uint64_t{static_cast<unsigned char>(p[n - 1])} << 16);
    }
    return key;
  }
  static size_t SlotOf(const Key& key) {
    uint64_t h = (key.lo * 0x9E3779B97F4A7C15ULL) ^ ((key.hi + key.len) * 0xC2B2AE3D27D4EB4FULL);
    return static_cast<size_t>(h >> (64 - kSlotBits));
  }

  uint32_t generation_ = 1;
  // On the heap, not in the thread's static TLS (the cache lives in a
  // thread_local): 640 KB of TLS would not fit the small stacks some
  // libraries give their threads (civetweb's workers failed to start).
  std::vector<Slot> slots_ = std::vector<Slot>(size_t{1} << kSlotBits);
};

}  // namespace kvindex::tokenize::internal
