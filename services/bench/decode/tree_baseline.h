// The baseline of the decode benchmark: what generic consumers do.
//
// Unpacks the payload into a msgpack-c++ object tree (msgpack::unpack with a
// zone: one msgpack::object per value), then walks the tree converting each
// event into an owning struct (std::vector hashes and tokens, std::string
// fields) via the library's `as<T>()` conversions. Same validation scope as
// wire::BatchDecoder for the fields it reads; errors (msgpack exceptions)
// are caught inside and reported as a Status.
//
// The result can be handed to SourceProcessor::ProcessDecoded so that the
// full "tree decode + normalize" pipeline is measured with the same
// normalizer as the real one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shared/base/status.h"
#include "shared/wire/engine_event.h"

namespace kvindex::bench {

// One event as generic consumers keep it: everything owned.
struct OwnedEvent {
  std::string type;
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::vector<uint32_t> tokens;
  uint32_t block_size = 0;
  std::optional<std::string> medium, lora_name, cache_salt, spec_kind, locality;
  std::optional<int64_t> group_idx;
};

class TreeBaselineDecoder {
 public:
  // Decodes into owned events; `batch` views point into this object.
  Status Decode(std::span<const uint8_t> payload, wire::EngineBatch* batch);

 private:
  std::vector<OwnedEvent> owned_;
  std::vector<wire::EngineEvent> events_;
};

}  // namespace kvindex::bench
