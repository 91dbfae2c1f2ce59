// libFuzzer target: engine msgpack batch decoder + normalizer.
//
// Feeds arbitrary bytes to wire::BatchDecoder and, through
// normalize::SourceProcessor, to the whole normalization path (twice, so the
// second pass runs against the state the first one built: re-announcements,
// removals, placeholders). The first input byte picks the configuration
// (model block size, observer on/off, configured rank); the rest is the
// payload. Checks the invariants that must hold for any input:
//   - decoding is deterministic and never reads out of bounds (ASan);
//   - a failed decode reports an offset inside the payload and appends
//     exactly one "cleared" per rank;
//   - a successful decode yields views inside the scratch / payload;
//   - every emitted placement is well formed (stored/removed have hashes);
//   - ClearAll leaves no tracked blocks.
// Build: CC=clang CXX=clang++ cmake -DKVINDEX_FUZZ=ON -DKVINDEX_SANITIZE=ON ...
// Run:   tests/fuzz/run_fuzzers.sh [seconds]   (docs/fuzzing.md)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "shared/normalize/source_processor.h"
#include "shared/wire/batch_decoder.h"

namespace {

using kvindex::PlacementEvent;
using kvindex::PlacementKind;

void Check(bool condition) {
  if (!condition) std::abort();
}

class CountingObserver : public kvindex::normalize::EventObserver {
 public:
  void OnEvent(const kvindex::wire::EngineEvent& event,
               const kvindex::normalize::EventOutcome& outcome) override {
    Check(outcome.blocks.size() == event.block_hashes.size());
    ++events;
  }
  size_t events = 0;
};

void CheckPlacements(const std::vector<PlacementEvent>& out) {
  for (const PlacementEvent& p : out) {
    if (p.kind == PlacementKind::kStored || p.kind == PlacementKind::kRemoved) {
      Check(!p.block_hashes.empty());
    } else {
      Check(p.kind == PlacementKind::kCleared && p.block_hashes.empty());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t config = data[0];
  const std::span<const uint8_t> payload(data + 1, size - 1);

  // 1. The decoder alone, twice: same verdict, same events.
  kvindex::wire::BatchDecoder decoder;
  kvindex::wire::EngineBatch batch;
  const kvindex::Status first = decoder.Decode(payload, &batch);
  const size_t events = batch.events.size();
  if (!first.ok()) {
    Check(decoder.error_offset() <= payload.size());
    Check(events == 0);
  } else {
    for (const kvindex::wire::EngineEvent& event : batch.events) {
      Check(event.offset < payload.size());
      Check(event.tag.empty() ||
            (reinterpret_cast<const uint8_t*>(event.tag.data()) >= payload.data() &&
             reinterpret_cast<const uint8_t*>(event.tag.data()) + event.tag.size() <=
                 payload.data() + payload.size()));
    }
  }
  const kvindex::Status second = decoder.Decode(payload, &batch);
  Check(first.ok() == second.ok() && batch.events.size() == events);

  // 2. The normalizer over the same payload, twice.
  kvindex::normalize::SourceOptions options;
  options.worker = "fuzz";
  options.model = "m";
  options.block_size = (config & 0x0f) == 0 ? 16 : (config & 0x0f);
  options.dp_rank = (config >> 5) & 1;
  kvindex::normalize::SourceStats stats;
  kvindex::normalize::SourceProcessor processor(options, &stats);
  CountingObserver observer;
  if (config & 0x10) processor.SetObserver(&observer);
  std::vector<PlacementEvent> out;
  for (int pass = 0; pass < 2; ++pass) {
    out.clear();
    const kvindex::Status status = processor.ProcessPayload(payload, &out);
    Check(status.ok() == first.ok());
    CheckPlacements(out);
    if (!status.ok()) Check(!out.empty() && out.back().kind == PlacementKind::kCleared);
  }
  if (config & 0x10) Check(observer.events == (first.ok() ? 2 * events : 0));
  out.clear();
  processor.ClearAll(&out);
  CheckPlacements(out);
  Check(processor.tracked_blocks() == 0);
  return 0;
}
