#include "shared/consume/in_process_log_reader.h"

namespace kvindex::consume {

Status InProcessLogReader::Open(uint64_t first_position) {
  if (first_position == 0) return absl::InvalidArgumentError("log positions start at 1");
  base_.store(first_position - sink_->drained(), std::memory_order_release);
  open_target_.store(LastKnownPosition(), std::memory_order_release);
  return absl::OkStatus();
}

Status InProcessLogReader::Read(LogBatch* batch, size_t max_events,
                                std::chrono::milliseconds wait) {
  // This thread is the only drainer, so drained() is exact here.
  const uint64_t first = base_.load(std::memory_order_relaxed) + sink_->drained();
  const size_t before = batch->events.size();
  const size_t n = sink_->Drain(&batch->events, max_events, wait);
  for (size_t i = 0; i < n; ++i) {
    LogBatch::Message& message = batch->messages.emplace_back();
    message.position = first + i;
    message.end = before + i + 1;
  }
  return absl::OkStatus();
}

uint64_t InProcessLogReader::LastKnownPosition() const {
  return base_.load(std::memory_order_acquire) + sink_->published() - 1;
}

}  // namespace kvindex::consume
