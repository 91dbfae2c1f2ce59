// Per-entry digest term (semantics.md section 6):
//   key(e) = utf8(model) 0x00 utf8(worker) 0x00 le_u32(dp_rank) u8(tier) le_u64(canonical)
//   digest = sum of XXH3_64(key(e), seed 0) over all entries (mod 2^64)
// The (model, source) prefix is built once per source and copied once per run
// of hashes, so each inserted or erased entry costs one short XXH3.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/model/source_key.h"
#include "shared/model/tier.h"

namespace kvindex::index::internal {

// utf8(model) 0x00 utf8(worker) 0x00 le_u32(dp_rank)
std::string DigestPrefix(std::string_view model, const SourceKey& source);

// Sum over `hashes` of XXH3_64(prefix || u8(tier) || le_u64(hash), seed 0)
// (the key buffer is built once).
uint64_t EntryDigestSum(std::string_view prefix, Tier tier, const uint64_t* hashes, size_t n);

}  // namespace kvindex::index::internal
