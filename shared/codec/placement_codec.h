// The placement-event codec used on NATS JetStream (docs/events.md).
//
// One message carries the placement events of one engine batch as a msgpack
// map with a schema version and named fields. Decoding is forward
// compatible: unknown keys are ignored and events of unknown kinds are
// skipped and counted, so a newer agent can talk to an older router.
//
//   std::string bytes;
//   codec::EncodePlacementBatch(events, &bytes);
//   KVINDEX_ASSIGN_OR_RETURN(auto batch, codec::DecodePlacementBatch(bytes));
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/model/placement_event.h"

namespace kvindex::codec {

// Written into every message as "v". Bump when a field changes meaning.
inline constexpr uint32_t kPlacementSchemaVersion = 1;

// Who sent a message and where it stands in its sender's sequence. Agents
// number their messages 1, 2, 3, ... per incarnation (a process start), so a
// router sees a lost or reordered message as a gap in msg_seq and fails
// closed (consume::AgentTable). Messages that routers append (expiry) carry
// no sequence: msg_seq 0.
struct MessageHeader {
  std::string agent;         // node id of the sending agent; "" = unsequenced
  uint64_t incarnation = 0;  // the sending process's start, ns since the epoch
  uint64_t msg_seq = 0;      // 1, 2, 3, ... within the incarnation; 0 = unsequenced
  // 1, 2, 3, ... per subject within the incarnation (docs/events.md,
  // "Numbering"); 0 = absent (an agent from before the field): gaps are
  // judged by msg_seq.
  uint64_t subject_seq = 0;

  bool sequenced() const { return msg_seq != 0; }
  friend bool operator==(const MessageHeader&, const MessageHeader&) = default;
};

// Writes the encoded batch into *out (replacing its content). The header's
// fields are written only when header.sequenced(). The encoder writes what it
// is given, so tests can craft hostile messages; a sequenced header without
// an agent is one (the decoder refuses it). Producers keep the contract:
// JetStreamPublisher refuses an empty node at Start; routers' appends are
// unsequenced.
void EncodePlacementBatch(std::span<const PlacementEvent> events, std::string* out,
                          const MessageHeader& header = {});

// An upper bound of the bytes `event` takes in an encoded batch (every
// integer counted at its widest, strings and containers exactly): a batch of
// events encodes to at most EncodedHeaderBound(agent) plus the sum of theirs.
// What a producer sizes its messages with (JetStreamPublisher: a message over
// the server's max_payload is refused by the client, so never sent).
size_t EncodedEventBound(const PlacementEvent& event);
size_t EncodedHeaderBound(std::string_view agent);

struct DecodedPlacementBatch {
  uint32_t version = 0;
  MessageHeader header;
  std::vector<PlacementEvent> events;
  // Events whose "kind" this build does not know (written by a newer agent).
  uint32_t skipped_unknown_kind = 0;
};

// InvalidArgument naming the field when the bytes are not a placement batch
// (not msgpack, no "v", a known field of the wrong type, ...).
StatusOr<DecodedPlacementBatch> DecodePlacementBatch(std::string_view bytes);

}  // namespace kvindex::codec
