// RowOrder: puts match rows in result order (longest desc, then the source's
// rank, i.e. SortWorkerMatches' order) without a comparison sort in the
// common case. A 64-source answer has 2-4 distinct lengths on the Mooncake
// trace; per length, a bitmap over ranks yields its rows in rank order, so
// ordering costs O(rows x lengths) word operations instead of a sort (which
// was ~20 % of a 64-row lookup). More than kMaxLengths lengths: sort.
//
// Thread safety: one RowOrder per thread (see ThreadLocal()).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "shared/index/internal/chain_node.h"

namespace kvindex::index::internal {

class RowOrder {
 public:
  static constexpr int kMaxLengths = 8;

  static RowOrder& ThreadLocal() {
    thread_local RowOrder order;
    return order;
  }

  void Clear() {
    keys_.clear();
    num_lengths_ = 0;
    max_rank_ = 0;
  }

  // rank < kMaxSources, slot < kMaxSources (the accumulator's row slot).
  void Add(uint32_t longest, uint32_t rank, uint32_t slot) {
    keys_.push_back(uint64_t{~longest} << 32 | uint64_t{rank} << 12 | slot);
    slot_of_rank_[rank] = static_cast<uint16_t>(slot);
    max_rank_ = std::max(max_rank_, rank);
    if (num_lengths_ > kMaxLengths) return;
    for (int i = 0; i < num_lengths_; ++i) {
      if (lengths_[i] == longest) return;
    }
    if (num_lengths_ < kMaxLengths) lengths_[num_lengths_] = longest;
    ++num_lengths_;  // kMaxLengths + 1 = too many: sort
  }

  // fn(slot) for every row, in result order.
  template <typename Fn>
  void ForEach(const Fn& fn) {
    if (num_lengths_ > kMaxLengths) {
      std::sort(keys_.begin(), keys_.end());
      for (uint64_t key : keys_) fn(static_cast<uint32_t>(key & 0xFFF));
      return;
    }
    std::sort(lengths_, lengths_ + num_lengths_, [](uint32_t a, uint32_t b) { return a > b; });
    const uint32_t words = max_rank_ / 64 + 1;
    for (int i = 0; i < num_lengths_; ++i) {
      const uint64_t key_length = uint64_t{~lengths_[i]};
      std::fill_n(bits_, words, 0);
      for (uint64_t key : keys_) {
        if ((key >> 32) != key_length) continue;
        const uint32_t rank = (key >> 12) & 0xFFF;
        bits_[rank / 64] |= uint64_t{1} << (rank % 64);
      }
      for (uint32_t w = 0; w < words; ++w) {
        for (uint64_t b = bits_[w]; b != 0; b &= b - 1) {
          fn(slot_of_rank_[w * 64 + std::countr_zero(b)]);
        }
      }
    }
  }

 private:
  std::vector<uint64_t> keys_;  // ~longest << 32 | rank << 12 | slot
  uint32_t lengths_[kMaxLengths] = {};
  int num_lengths_ = 0;
  uint32_t max_rank_ = 0;
  uint16_t slot_of_rank_[kMaxSources] = {};
  uint64_t bits_[kMaxSources / 64] = {};
};

}  // namespace kvindex::index::internal
