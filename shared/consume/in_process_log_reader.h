// InProcessLogReader: the LogReader over an InProcessSink, the ordered log
// of `kvindex-router --embedded`. Every event is its own message; positions
// count events from Open's first_position on, as they are drained.
//
//   InProcessSink sink;
//   InProcessLogReader reader(&sink);
//   ApplyLoop loop(&reader, &index, &probe, {});
//
// Thread safety: as LogReader.
#pragma once

#include <atomic>

#include "shared/consume/log_reader.h"
#include "shared/publish/in_process_sink.h"

namespace kvindex::consume {

class InProcessLogReader final : public LogReader {
 public:
  // `sink` must outlive the reader.
  explicit InProcessLogReader(InProcessSink* sink) : sink_(sink) {}

  Status Open(uint64_t first_position) override;
  Status Read(LogBatch* batch, size_t max_events, std::chrono::milliseconds wait) override;
  uint64_t LastKnownPosition() const override;
  // What the sink held when Open was called (not what it holds now: under
  // load the sink is never drained, and readiness would flap).
  uint64_t OpenTarget() const override { return open_target_.load(std::memory_order_acquire); }

 private:
  InProcessSink* const sink_;
  // The k-th event the sink ever drained (k from 0) is at position base_ + k.
  std::atomic<uint64_t> base_{1};
  std::atomic<uint64_t> open_target_{0};
};

}  // namespace kvindex::consume
