// Identity of one engine publisher: (worker id, dp_rank) (semantics.md section 1).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/hash/hash.h"

namespace kvindex {

struct SourceKey {
  std::string worker;    // from configuration (pod / endpoint name)
  uint32_t dp_rank = 0;  // from the batch envelope; nil = 0

  friend bool operator==(const SourceKey&, const SourceKey&) = default;
  friend auto operator<=>(const SourceKey&, const SourceKey&) = default;

  template <typename H>
  friend H AbslHashValue(H h, const SourceKey& key) {
    return H::combine(std::move(h), key.worker, key.dp_rank);
  }
};

}  // namespace kvindex
