// SglangAliasReference: the naive oracle of SglangAliasMap
// (sglang_alias_map.h) for its differential test: the same rules written
// the obvious way, an ordered map per model, conflicts found by scanning
// (a conflict drops both aliases and poisons both SGLang hashes),
// and after every message every alias checked against the index, with no
// bookkeeping of what a removal or a clear could have touched.
//
// Thread safety: none; tests drive it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "shared/compat/sglang_alias_map.h"
#include "shared/index/index_interface.h"
#include "shared/model/placement_event.h"

namespace kvindex::compat {

class SglangAliasReference {
 public:
  SglangAliasReference(const index::IndexInterface* index, size_t max_entries,
                       size_t max_poisoned = size_t{1} << 16)
      : index_(index), max_entries_(max_entries), max_poisoned_(max_poisoned) {}

  void OnApplied(std::span<const PlacementEvent> events);
  // Every alias, sorted as SglangAliasMap::Entries.
  std::vector<SglangAlias> Entries() const;

 private:
  const index::IndexInterface* const index_;
  const size_t max_entries_;
  const size_t max_poisoned_;
  std::map<std::string, std::map<uint64_t, uint64_t>> aliases_;  // model -> sglang -> canonical
  std::map<std::string, std::set<uint64_t>> poisoned_;           // model -> sglang hashes
  std::set<std::string> closed_;  // models holding max_poisoned poisoned hashes
};

}  // namespace kvindex::compat
