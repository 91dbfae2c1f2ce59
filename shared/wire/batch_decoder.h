// BatchDecoder: one msgpack KVEventBatch payload -> EngineBatch views.
//
// Decodes every producer form kvindex knows (docs/wire-format.md): the
// positional envelope [ts, events, dp_rank] with 2 or 3 elements, events as
// tagged maps (any key order, fixmap/map16/map32 headers) or tagged legacy
// arrays (guarded by length), hashes as uint / int / bin / str, token ids as
// ints or EAGLE bigram pairs. Unknown tags and unknown keys are skipped and
// counted; a field of the wrong type inside a known event, a missing
// block_hashes, a truncated payload or trailing bytes fail the whole payload
// with InvalidArgument naming the byte offset ("byte 42: ...").
//
// Use this when you need the engine's view of a batch (normalizer, `kvindex-ctl
// decode`). It is a hand-written cursor over the msgpack spec, not a tree
// builder: strings are views into the payload, hashes and tokens go to
// scratch vectors that are reused across calls, so steady-state decoding
// allocates nothing. The whole payload is validated before Decode returns,
// so a caller never applies half of a bad batch.
//
//   BatchDecoder decoder;
//   EngineBatch batch;
//   if (Status s = decoder.Decode(payload, &batch); !s.ok()) { ... s.message() ... }
//   for (const EngineEvent& event : batch.events) { ... }
//
// Cost: O(payload bytes); one pass (two over a map event whose "type" key is
// not first).
//
// Invalidation: `batch` views are valid until the next Decode on the same
// decoder and while `payload` is alive.
//
// Thread safety: not thread safe; use one decoder per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shared/base/status.h"
#include "shared/wire/engine_event.h"

namespace kvindex::wire {

class BatchDecoder {
 public:
  BatchDecoder() = default;
  BatchDecoder(const BatchDecoder&) = delete;
  BatchDecoder& operator=(const BatchDecoder&) = delete;

  // On failure `batch` is left empty and error_offset() holds the byte offset
  // (also part of the status message).
  Status Decode(std::span<const uint8_t> payload, EngineBatch* batch);

  // Byte offset of the last failure (0 after a success).
  size_t error_offset() const { return error_offset_; }

 private:
  // Where each event's variable-length data lives in the scratch vectors
  // (indices, because the vectors may grow while the batch is decoded).
  struct Slots {
    uint32_t hash_begin = 0, hash_count = 0;
    uint32_t token_begin = 0, token_count = 0;
  };
  friend class DecodeRun;

  std::vector<EngineEvent> events_;
  std::vector<Slots> slots_;
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> tokens_;
  size_t error_offset_ = 0;
};

}  // namespace kvindex::wire
