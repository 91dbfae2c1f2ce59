#include "shared/consume/filtered_log_reader.h"

#include <algorithm>
#include <utility>

namespace kvindex::consume {

std::vector<std::string> FilterSubjects(const nats::SubjectScheme& scheme,
                                        const std::vector<std::string>& models) {
  std::vector<std::string> out;
  for (const std::string& model : models) {
    out.push_back(scheme.prefix + "." + nats::ModelToken(model) + ".*");
  }
  out.push_back(scheme.prefix + "._agent.*");
  out.push_back(scheme.prefix + "._expire.*");
  return out;
}

FilteredLogReader::FilteredLogReader(jsCtx* js, FilteredLogOptions options)
    : options_(std::move(options)) {
  consumers_.resize(options_.subjects.size());
  for (size_t i = 0; i < consumers_.size(); ++i) {
    JetStreamLogOptions log = options_.log;
    log.subjects = options_.subjects[i];
    log.next_by_subject = options_.next_by_subject;
    if (i > 0) log.prepare = nullptr;  // once per Open
    consumers_[i].subject = options_.subjects[i];
    consumers_[i].reader = std::make_unique<JetStreamLogReader>(js, std::move(log));
  }
}

Status FilteredLogReader::Open(uint64_t first_position) {
  if (first_position == 0) return absl::InvalidArgumentError("log positions start at 1");
  if (consumers_.empty() || !options_.next_by_subject || !options_.stream_last) {
    return absl::InvalidArgumentError("filtered log reader: no subjects or no position checks");
  }
  uint64_t target = 0;
  for (Consumer& c : consumers_) {
    KVINDEX_RETURN_IF_ERROR(c.reader->Open(first_position));
    target = std::max(target, c.reader->OpenTarget());
    c.buffer.Clear();
    c.next = 0;
    c.proven = first_position - 1;
    c.next_known = 0;
  }
  last_returned_ = first_position - 1;
  received_ = first_position - 1;
  last_horizon_check_ = {};
  open_target_.store(target, std::memory_order_release);
  stream_last_.store(std::max(target, stream_last_.load(std::memory_order_relaxed)),
                     std::memory_order_release);
  return absl::OkStatus();
}

uint64_t FilteredLogReader::LastKnownPosition() const {
  uint64_t known = stream_last_.load(std::memory_order_acquire);
  for (const Consumer& c : consumers_) known = std::max(known, c.reader->LastKnownPosition());
  return known;
}

Status FilteredLogReader::Prove(Consumer& c, uint64_t position, uint64_t received) {
  if (c.proven >= position || c.next_known > c.proven) return absl::OkStatus();
  // `received` is stored (read, or the stream's end read before asking): no
  // message of c's filter from c.proven + 1 on means none through it.
  ++questions_;
  KVINDEX_ASSIGN_OR_RETURN(uint64_t next, options_.next_by_subject(c.proven + 1, c.subject));
  c.proven = std::max(c.proven, next == 0 ? received : next - 1);
  c.next_known = next;
  return absl::OkStatus();
}

Status FilteredLogReader::Read(LogBatch* batch, size_t max_events, std::chrono::milliseconds wait) {
  // Refill the consumers that hold nothing; wait (shared out) only when
  // none holds anything.
  bool any = std::any_of(consumers_.begin(), consumers_.end(),
                         [](const Consumer& c) { return !c.Empty(); });
  for (Consumer& c : consumers_) {
    if (!c.Empty()) continue;
    c.buffer.Clear();
    c.next = 0;
    const auto share = any ? std::chrono::milliseconds(0)
                           : std::max(std::chrono::milliseconds(1),
                                      wait / static_cast<int64_t>(consumers_.size()));
    KVINDEX_RETURN_IF_ERROR(c.reader->Read(&c.buffer, max_events, share));
    if (c.Empty()) continue;
    any = true;
    const uint64_t last = c.buffer.messages.back().position;
    c.proven = std::max(c.proven, last);
    if (last >= c.next_known) c.next_known = 0;
    received_ = std::max(received_, last);
  }

  const size_t before = batch->messages.size();
  size_t events = 0;
  while (events < max_events) {
    Consumer* head = nullptr;
    for (Consumer& c : consumers_) {
      if (!c.Empty() && (head == nullptr || c.Head() < head->Head())) head = &c;
    }
    if (head == nullptr) break;
    const uint64_t position = head->Head();
    bool proven = true;
    for (Consumer& c : consumers_) {
      // A consumer holding a message holds none below it unread (ordered),
      // and the head is the lowest held.
      if (&c == head || !c.Empty()) continue;
      if (Status status = Prove(c, position, received_); !status.ok()) {
        if (batch->messages.size() == before) return status;
        return absl::OkStatus();  // asked again next time
      }
      if (c.proven < position) {  // its message below `position` is in flight
        proven = false;
        break;
      }
    }
    if (!proven) break;
    const LogBatch::Message& message = head->buffer.messages[head->next];
    const auto message_events = head->buffer.Events(head->next);
    batch->events.insert(batch->events.end(), message_events.begin(), message_events.end());
    LogBatch::Message& out = batch->messages.emplace_back(message);
    out.end = batch->events.size();
    out.filtered = true;
    events += message_events.size();
    last_returned_ = position;
    head->next += 1;
  }
  if (batch->messages.size() > before || any) return absl::OkStatus();
  return MaybeHorizon(batch);
}

Status FilteredLogReader::MaybeHorizon(LogBatch* batch) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_horizon_check_ < options_.horizon_check) return absl::OkStatus();
  last_horizon_check_ = now;
  KVINDEX_ASSIGN_OR_RETURN(uint64_t last, options_.stream_last());
  if (last > stream_last_.load(std::memory_order_relaxed)) {
    stream_last_.store(last, std::memory_order_release);
  }
  if (last <= last_returned_) return absl::OkStatus();
  uint64_t horizon = last;
  for (Consumer& c : consumers_) {
    KVINDEX_RETURN_IF_ERROR(Prove(c, last, last));
    horizon = std::min(horizon, c.proven);
  }
  if (horizon <= last_returned_) return absl::OkStatus();
  // Every consumer is empty and complete through `horizon`: the positions up
  // to it are other subjects'. One empty message moves the log past them.
  LogBatch::Message& gap = batch->messages.emplace_back();
  gap.position = horizon;
  gap.end = batch->events.size();
  gap.filtered = true;
  last_returned_ = horizon;
  ++horizons_;
  return absl::OkStatus();
}

}  // namespace kvindex::consume
