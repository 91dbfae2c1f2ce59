// The hash schemes of the routers kvindex serves (docs/compat.md), mapped to
// ours in one place. Our canonical hashes (semantics.md section 2) are
// NVIDIA Dynamo's scheme, so every mapping here is a change of
// representation, never a translation table:
//
//   Dynamo   /query_tiered_by_hash, /query_by_hash: `block_hashes` are
//            Dynamo LocalBlockHash values (XXH3-64 of the block's tokens as
//            little-endian u32, seed 1337) sent as i64: the same 64 bits as
//            our local hashes. FromDynamoI64 reinterprets them.
//   Mooncake /query_by_hash: `seq_hashes` are the RFC #1403 rolling hashes,
//            XXH3-64 with seed S over the tokens, then over parent || local.
//            With S = 1337 (the seed the RFC's Dynamo-served indexer uses)
//            they are our canonical sequence hashes bit for bit; any other
//            seed cannot be mapped (a hash does not give its tokens back), so
//            it is refused (CheckMooncakeSeed).
//   SGLang   KvIndexer gRPC (shared/compat/sglang_indexer.h): their current
//            .proto carries hashes as sfixed64 (FromSglangI64 reinterprets
//            them, as for Dynamo); an earlier version carried decimal
//            strings of signed i64 (`i64::to_string`), where an unsigned
//            spelling above i64::MAX is the same block (ParseSglangHash /
//            SglangHashString). Either way the 64 bits are looked up as our
//            canonical sequence hashes: a sender must hash with our scheme
//            (docs/compat.md, "SGLang": SGLang's own engine hashes are
//            SHA-256 based and are not ours).
//
// Test vectors: compat_hashes_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shared/base/status.h"
#include "shared/hashing/canonical_hash.h"

namespace kvindex::query::compat {

// The seed of the Mooncake RFC's rolling hashes that equals our scheme.
inline constexpr uint64_t kMooncakeSeed = hashing::kRootSeed;

// A Dynamo i64 hash as our u64 (two's complement, all 64 bits kept).
inline uint64_t FromDynamoI64(int64_t value) { return static_cast<uint64_t>(value); }
// Our u64 hash as Dynamo sends it (i64).
inline int64_t ToDynamoI64(uint64_t value) { return static_cast<int64_t>(value); }

// An SGLang sfixed64 hash as our u64 sequence hash (all 64 bits kept).
inline uint64_t FromSglangI64(int64_t value) { return static_cast<uint64_t>(value); }
// Our u64 hash as SGLang's sfixed64.
inline int64_t ToSglangI64(uint64_t value) { return static_cast<int64_t>(value); }

// OK when Mooncake sequence hashes made with `seed` are our canonical ones.
Status CheckMooncakeSeed(uint64_t seed);

// An SGLang hash string: the decimal of a signed i64 ("-42"), or of a u64
// above i64::MAX (the same 64 bits). Anything else -> InvalidArgument.
StatusOr<uint64_t> ParseSglangHash(std::string_view text);
// Our u64 hash in SGLang's spelling (signed i64 decimal).
std::string SglangHashString(uint64_t value);

}  // namespace kvindex::query::compat
