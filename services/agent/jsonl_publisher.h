// JsonlPublisher: a PlacementPublisher that writes one JSON object per
// placement event and line (kvindex-agent --output jsonl). A real debugging
// sink, and the agent's only output until JetStream publishing lands.
//
//   {"kind":"stored","model":"M","worker":"w0","dp_rank":0,"agent":"node-a",
//    "event_id":1764460000000000001,"timestamp_ns":...,"tier":"device",
//    "block_size":16,"parent_hash":null,"block_hashes":[15671544057904749233]}
//
// u64 values are JSON integers (exact). Each Publish call is written and
// flushed as one unit, so lines of concurrent sources never interleave.
//
// Thread safety: Publish/Flush may be called from any thread.
#pragma once

#include <cstdio>
#include <string>

#include "shared/base/mutex.h"
#include "shared/publish/publisher.h"

namespace kvindex::agent {

// The JSON line (without newline) for one event.
std::string PlacementEventJson(const PlacementEvent& event);

class JsonlPublisher final : public PlacementPublisher {
 public:
  // `out` is not owned (stdout by default).
  explicit JsonlPublisher(std::FILE* out = stdout) : out_(out) {}

  // Unavailable when the stream cannot be written (e.g. closed pipe).
  Status Publish(std::span<const PlacementEvent> events) override;
  Status Flush() override;

 private:
  Mutex mu_;  // one batch at a time, whole, on the stream
  std::FILE* const out_ ABSL_PT_GUARDED_BY(mu_);
  std::string buffer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::agent
