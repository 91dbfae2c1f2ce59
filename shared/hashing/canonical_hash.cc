#include "shared/hashing/canonical_hash.h"

#include <bit>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvindex::hashing {

// The canonical hash is defined over little-endian bytes; hashing the
// in-memory representation directly is only valid on little-endian hosts.
static_assert(std::endian::native == std::endian::little,
              "canonical hashing assumes a little-endian host");

uint64_t LocalHashSeed(std::string_view lora_name, std::string_view cache_salt) {
  uint64_t seed = kRootSeed;
  if (!lora_name.empty())
    seed += XXH3_64bits_withSeed(lora_name.data(), lora_name.size(), kLoraSeed);
  if (!cache_salt.empty()) {
    seed += XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), kCacheSaltSeed);
  }
  return seed;
}

uint64_t LocalBlockHash(std::span<const uint32_t> tokens, uint64_t seed) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

uint64_t ChainHash(uint64_t parent_sequence_hash, uint64_t local_hash) {
  uint64_t buf[2] = {parent_sequence_hash, local_hash};
  return XXH3_64bits_withSeed(buf, sizeof(buf), kRootSeed);
}

void ComputeLocalHashes(std::span<const uint32_t> tokens, uint32_t block_size, uint64_t seed,
                        std::vector<uint64_t>* out) {
  out->clear();
  if (block_size == 0) return;
  const size_t blocks = tokens.size() / block_size;
  out->reserve(blocks);
  for (size_t i = 0; i < blocks; ++i) {
    out->push_back(LocalBlockHash(tokens.subspan(i * block_size, block_size), seed));
  }
}

void ComputeEagleLocalHashes(std::span<const uint32_t> flat_tokens, uint32_t block_size,
                             uint64_t seed, std::vector<uint64_t>* out) {
  out->clear();
  if (block_size == 0 || flat_tokens.empty()) return;
  const size_t blocks = (flat_tokens.size() - 1) / block_size;
  out->reserve(blocks);
  for (size_t i = 0; i < blocks; ++i) {
    out->push_back(LocalBlockHash(flat_tokens.subspan(i * block_size, block_size + 1), seed));
  }
}

void ComputeSequenceHashes(std::span<const uint64_t> local_hashes, std::optional<uint64_t> parent,
                           std::vector<uint64_t>* out) {
  out->clear();
  out->reserve(local_hashes.size());
  std::optional<uint64_t> previous = parent;
  for (uint64_t local : local_hashes) {
    const uint64_t seq = previous.has_value() ? ChainHash(*previous, local) : local;
    out->push_back(seq);
    previous = seq;
  }
}

}  // namespace kvindex::hashing
