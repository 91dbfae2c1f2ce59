// Canonical block hashes, compatible with NVIDIA Dynamo's router hashes
// (semantics.md section 2).
//
// A block's canonical *sequence* hash identifies the whole token prefix up to
// and including it, so two workers holding the same prefix hold the same
// hash whatever their engines' own hashes are. Use these functions for every
// token -> hash conversion (agent normalization and router queries alike).
//
//   std::vector<uint64_t> local, seq;
//   ComputeLocalHashes(tokens, 16, LocalHashSeed(lora, salt), &local);
//   ComputeSequenceHashes(local, std::nullopt, &seq);
//
// Cost: one XXH3 over 4*block_size bytes per block plus one 16-byte XXH3 per
// chain step; no allocation when `out` has capacity.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kvindex::hashing {

// Seed of the local hash when neither LoRA nor cache salt is present, and the
// seed of every chain step. Pinned by a test (Dynamo compatibility).
inline constexpr uint64_t kRootSeed = 1337;
// XXH3 seeds for mixing the LoRA name and cache salt into the local seed.
inline constexpr uint64_t kLoraSeed = 0;
inline constexpr uint64_t kCacheSaltSeed = 1;

// Seed for local hashes; an empty string means absent.
uint64_t LocalHashSeed(std::string_view lora_name, std::string_view cache_salt);

// XXH3_64 of the tokens as little-endian u32, with `seed`.
uint64_t LocalBlockHash(std::span<const uint32_t> tokens, uint64_t seed);

// seq[i] from seq[i-1] and local[i].
uint64_t ChainHash(uint64_t parent_sequence_hash, uint64_t local_hash);

// Local hashes of the complete blocks of `tokens`; a partial tail is ignored.
// `out` is cleared first. block_size must be > 0.
void ComputeLocalHashes(std::span<const uint32_t> tokens, uint32_t block_size, uint64_t seed,
                        std::vector<uint64_t>* out);

// SGLang EAGLE: `flat_tokens` are the bigram list flattened to firsts plus the
// last pair's second; block i hashes the window [i*B, i*B + B + 1).
void ComputeEagleLocalHashes(std::span<const uint32_t> flat_tokens, uint32_t block_size,
                             uint64_t seed, std::vector<uint64_t>* out);

// Sequence hashes chained from `parent` (nullopt = root: seq[0] = local[0]).
// `out` is cleared first.
void ComputeSequenceHashes(std::span<const uint64_t> local_hashes, std::optional<uint64_t> parent,
                           std::vector<uint64_t>* out);

}  // namespace kvindex::hashing
