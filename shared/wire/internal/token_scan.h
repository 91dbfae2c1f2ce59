// ScanTokens: the fast path of msgpack token-id arrays (BatchDecoder).
//
// Token ids (the bulk of every payload) are uint32 in one of four encodings
// (fixint, cc, cd, ce). With a large vocabulary almost all are cd (3 bytes)
// or ce (5 bytes), mixed unpredictably, so a token-at-a-time loop is bound by
// the latency of the dependency p -> type byte -> length -> p (~11 cycles).
//
// The group path cuts that chain: one SSE2 pass over the next 64 bytes marks
// every byte equal to 0xcd and every byte equal to 0xce (two bit masks). If
// the current position is a token start, the ce bits at offsets 0..10 fully
// determine where the next three tokens start under the assumption that each
// one is cd or ce, so a 2048-entry table indexed by those 11 bits gives the
// three start offsets and their total length. The assumption is then checked
// against the masks (each of the three starts must be 0xcd or 0xce); values
// are read with unaligned big-endian loads from the known starts, off the
// critical path. Up to four groups (12 tokens, at most 60 bytes) are taken
// per 64-byte window. The chain per group is one table load plus a shift.
// A window that starts with 20 cd tokens in a row (every id below 65,536, as
// with 32k vocabularies) is taken whole, without the table.
//
// Anything else (fixint, cc, an invalid byte, fewer than 64 bytes left in
// the buffer, fewer than 3 tokens left) goes to the branch-free scalar loop:
// it reads 8 bytes big-endian and takes length, shift and mask from a table
// indexed by the type byte, for a few tokens, before the group path is tried
// again. Both paths accept only complete, in-bounds uint32 encodings and
// stop at the first other byte; BatchDecoder finishes with the checked generic
// path (which reports errors and offsets). Never reads past the buffer: the
// group path needs 64 bytes left, the scalar loop 8.
#pragma once

#include <cstdint>

namespace kvindex::wire::internal {

// Decodes up to `n` consecutive msgpack uint32 values (positive fixint, cc,
// cd or ce) from *pos into out[0..), stopping before the first other byte,
// or when fewer than 8 bytes are left. Advances *pos past what it decoded and
// returns how many it decoded (<= n). Reads nothing at or past `end`.
uint32_t ScanTokens(const uint8_t** pos, const uint8_t* end, uint32_t* out, uint32_t n);

}  // namespace kvindex::wire::internal
