// Test-only: a LogReader over a fixed list of messages, as JetStream would
// deliver them (several events per message, positions with holes, subjects
// and stored times when given). Messages may be added while a loop reads.
//
//   ScriptedReader reader;
//   reader.Add(3, {.agent = "node-a", .incarnation = 7, .msg_seq = 1}, {heartbeat},
//              false, "kvindex.events._agent.node-a");
//   ApplyLoop loop(&reader, &index, nullptr, {});
//
// Thread safety: every method takes the reader's lock.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shared/base/mutex.h"
#include "shared/consume/log_reader.h"

namespace kvindex::consume::testing {

// A LogReader over a fixed list of messages, as JetStream would deliver
// them: several events per message, positions with holes.
class ScriptedReader final : public LogReader {
 public:
  void Add(uint64_t position, codec::MessageHeader header, std::vector<PlacementEvent> events,
           bool invalid = false, std::string subject = "", uint64_t stored_ns = 0) {
    LogBatch::Message m;
    m.position = position;
    m.header = std::move(header);
    m.invalid = invalid;
    m.subject = std::move(subject);
    m.stored_ns = stored_ns;
    MutexLock lock(&mu_);
    for (auto& e : events) log_.events.push_back(std::move(e));
    m.end = log_.events.size();
    log_.messages.push_back(m);
  }
  Status Open(uint64_t first) override {
    MutexLock lock(&mu_);
    next_ = 0;
    while (next_ < log_.messages.size() && log_.messages[next_].position < first) ++next_;
    target_ = log_.messages.empty() ? 0 : log_.messages.back().position;
    return absl::OkStatus();
  }
  Status Read(LogBatch* batch, size_t, std::chrono::milliseconds) override {
    MutexLock lock(&mu_);
    for (; next_ < log_.messages.size(); ++next_) {
      for (const PlacementEvent& e : log_.Events(next_)) batch->events.push_back(e);
      LogBatch::Message m = log_.messages[next_];
      m.end = batch->events.size();
      batch->messages.push_back(m);
    }
    return absl::OkStatus();
  }
  uint64_t LastKnownPosition() const override {
    MutexLock lock(&mu_);
    return log_.messages.empty() ? 0 : log_.messages.back().position;
  }
  uint64_t OpenTarget() const override {
    MutexLock lock(&mu_);
    return target_;
  }

 private:
  mutable Mutex mu_;
  LogBatch log_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t target_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvindex::consume::testing
