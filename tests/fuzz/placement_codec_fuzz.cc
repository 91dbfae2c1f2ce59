// libFuzzer target for the placement-event codec (shared/codec), the format
// routers read from the log (hostile until checked). Two input shapes, by
// the first byte:
//  - even: the rest is one message. Decoding must fail cleanly or succeed;
//    a decoded batch, encoded again with its header, must decode to the same
//    events and header (what a router applied is what the codec can write);
//  - odd: a FuzzedDataProvider script of events (every kind, odd strings,
//    extreme numbers) and a header, encoded then decoded: exactly equal.
// Traps on any difference.
// Build: cmake -DKVINDEX_FUZZ=ON -DKVINDEX_SANITIZE=ON with clang;
// run: build-fuzz/fuzz/placement_codec_fuzz tests/fuzz/corpus/placement_codec_fuzz
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/codec/placement_codec.h"

namespace {

using kvindex::PlacementEvent;
using kvindex::PlacementKind;
using kvindex::codec::DecodePlacementBatch;
using kvindex::codec::EncodePlacementBatch;
using kvindex::codec::MessageHeader;

void RoundTrip(const std::vector<PlacementEvent>& events, const MessageHeader& header) {
  std::string bytes;
  EncodePlacementBatch(events, &bytes, header);
  auto decoded = DecodePlacementBatch(bytes);
  if (!decoded.ok()) __builtin_trap();
  if (decoded->events != events) __builtin_trap();
  if (decoded->header != (header.sequenced() ? header : MessageHeader{})) __builtin_trap();
  if (decoded->skipped_unknown_kind != 0) __builtin_trap();
}

PlacementEvent MakeEvent(FuzzedDataProvider& in) {
  PlacementEvent e;
  e.kind = static_cast<PlacementKind>(in.ConsumeIntegralInRange<int>(0, 5));
  e.model = in.ConsumeRandomLengthString(64);
  e.source = {in.ConsumeRandomLengthString(64), in.ConsumeIntegral<uint32_t>()};
  e.agent = in.ConsumeRandomLengthString(32);
  e.event_id = in.ConsumeIntegral<uint64_t>();
  e.timestamp_ns = in.ConsumeIntegral<uint64_t>();
  const bool blocks = e.kind == PlacementKind::kStored || e.kind == PlacementKind::kRemoved;
  if (blocks) {
    e.tier = static_cast<kvindex::Tier>(in.ConsumeIntegralInRange<int>(0, kvindex::kNumTiers - 1));
    const size_t n = in.ConsumeIntegralInRange<size_t>(0, 64);
    for (size_t i = 0; i < n; ++i) e.block_hashes.push_back(in.ConsumeIntegral<uint64_t>());
  }
  if (e.kind == PlacementKind::kStored) {
    e.block_size = in.ConsumeIntegral<uint32_t>();
    if (in.ConsumeBool()) e.parent_hash = in.ConsumeIntegral<uint64_t>();
    const size_t sglang = in.ConsumeIntegralInRange<size_t>(0, 64);
    for (size_t i = 0; i < sglang; ++i) e.sglang_hashes.push_back(in.ConsumeIntegral<uint64_t>());
  }
  if (e.kind == PlacementKind::kHeartbeat) {
    e.lease_ms = in.ConsumeIntegral<uint32_t>();
    const size_t n = in.ConsumeIntegralInRange<size_t>(0, 16);
    for (size_t i = 0; i < n; ++i) {
      e.sources.push_back({in.ConsumeRandomLengthString(32), in.ConsumeIntegral<uint32_t>()});
    }
  }
  if (e.kind == PlacementKind::kAgentExpired) e.heartbeat_seq = in.ConsumeIntegral<uint64_t>();
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
    auto decoded = DecodePlacementBatch(bytes);
    if (!decoded.ok()) return 0;
    RoundTrip(decoded->events, decoded->header);
    return 0;
  }
  FuzzedDataProvider in(data + 1, size - 1);
  MessageHeader header;
  if (in.ConsumeBool()) {
    // A sequenced message names its agent (the decoder refuses one that does
    // not, and agents always do: AgentOptions::Validate requires a node id).
    // The first run of this target found that the encoder writes such a
    // message anyway (docs/fuzzing.md).
    header.agent = "a" + in.ConsumeRandomLengthString(32);
    header.incarnation = in.ConsumeIntegral<uint64_t>();
    header.msg_seq = in.ConsumeIntegral<uint64_t>();
  }
  std::vector<PlacementEvent> events;
  const size_t n = in.ConsumeIntegralInRange<size_t>(0, 8);
  for (size_t i = 0; i < n && in.remaining_bytes() > 0; ++i) events.push_back(MakeEvent(in));
  RoundTrip(events, header);
  return 0;
}
