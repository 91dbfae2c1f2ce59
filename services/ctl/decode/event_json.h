// EventJsonWriter: the output of `kvindex-ctl decode`, one JSON object per
// decoded engine event (docs/wire-format.md section 8), written by observing a
// SourceProcessor (shared/normalize/event_observer.h).
//
// Keys: file, batch, event, offset (byte offset of the event in the file),
// seq/topic (--frames), ts, dp_rank, type, form, engine_hashes, medium,
// tier, the BlockStored fields, canonical_hashes (null for blocks without
// one; `canonical_informational` when the event was dropped and the hashes
// only show what its tokens hash to), dropped (the DropReason label or
// null), dropped_blocks, placements. u64 values are exact JSON numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "shared/normalize/event_observer.h"

namespace kvindex::ctl {

class EventJsonWriter : public normalize::EventObserver {
 public:
  explicit EventJsonWriter(std::ostream* out) : out_(out) {}

  // Where the next batch comes from.
  void SetBatchContext(std::string file, uint64_t batch_index, size_t payload_offset,
                       std::optional<uint64_t> seq, std::optional<std::string_view> topic);

  void OnBatch(const wire::EngineBatch& batch, uint32_t dp_rank) override;
  void OnEvent(const wire::EngineEvent& event, const normalize::EventOutcome& outcome) override;

  uint64_t events_written() const { return events_written_; }

 private:
  std::ostream* out_;
  std::string file_;
  uint64_t batch_index_ = 0;
  size_t payload_offset_ = 0;
  std::optional<uint64_t> seq_;
  std::optional<std::string> topic_;
  double ts_ = 0;
  uint32_t event_index_ = 0;
  uint64_t events_written_ = 0;
};

}  // namespace kvindex::ctl
