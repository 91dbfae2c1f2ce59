#include "shared/consume/jetstream_log_reader.h"

#include <vector>
#include "shared/base/mutex.h"

#include <string_view>
#include <utility>

#include "shared/log/log.h"
#include "shared/nats/stream.h"
#include "shared/nats/subjects.h"

namespace kvindex::consume {
namespace {

// The sending node is the subject's last token (docs/operations.md,
// "Subjects"); "" when it does not decode.
std::string NodeOfSubject(const char* subject) {
  if (subject == nullptr) return "";
  const std::string_view s(subject);
  const size_t dot = s.rfind('.');
  if (dot == std::string_view::npos) return "";
  StatusOr<std::string> node = nats::DecodeToken(s.substr(dot + 1));
  return node.ok() ? *node : "";
}

}  // namespace

JetStreamLogReader::JetStreamLogReader(jsCtx* js, JetStreamLogOptions options)
    : js_(js), options_(std::move(options)) {
  if (options_.current_js) js_ = options_.current_js();
}

JetStreamLogReader::~JetStreamLogReader() { Unsubscribe(); }

void JetStreamLogReader::Unsubscribe() {
  if (sub_ == nullptr) return;
  natsSubscription_Unsubscribe(sub_);
  natsSubscription_Destroy(sub_);
  sub_ = nullptr;
}

void JetStreamLogReader::Abandon() {
  if (sub_ == nullptr) return;
  // cnats 3.4.1 reads the freed consumer name when it unsubscribes an ordered
  // consumer whose reset failed (a heap-use-after-free under ASan after a
  // nats-server restart). A stalled subscription is therefore left alone: it
  // drops whatever it still receives, and stays reachable until exit.
  natsSubscription_SetPendingLimits(sub_, 1, 1024);
  // What it had queued (up to pending_bytes: after a partition or a catch-up,
  // hundreds of messages of ~200 KB) is freed now, not kept with it.
  uint64_t queued = 0;
  uint64_t freed = 0;
  uint64_t freed_bytes = 0;
  if (natsSubscription_QueuedMsgs(sub_, &queued) == NATS_OK) {
    for (uint64_t i = 0; i < queued; ++i) {
      natsMsg* msg = nullptr;
      const natsStatus status = natsSubscription_NextMsg(&msg, sub_, 1);
      if (status == NATS_SLOW_CONSUMER) continue;
      if (status != NATS_OK) break;
      freed += 1;
      freed_bytes += static_cast<uint64_t>(natsMsg_GetDataLength(msg));
      natsMsg_Destroy(msg);
    }
  }
  if (freed > 0) {
    log::Get("consume")->info(
        "stream '{}': freed {} messages ({} bytes) queued for the subscription left behind",
        options_.stream, freed, freed_bytes);
  }
  static Mutex mu;
  static auto* const abandoned ABSL_PT_GUARDED_BY(mu) = new std::vector<natsSubscription*>();
  MutexLock lock(&mu);
  abandoned->push_back(sub_);
  sub_ = nullptr;
}

Status JetStreamLogReader::Subscribe(uint64_t first_position) {
  Unsubscribe();
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = options_.stream.c_str();
  so.Ordered = true;
  if (first_position > 1) {
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = first_position;
  } else {
    so.Config.DeliverPolicy = js_DeliverAll;
  }
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus status = js_SubscribeSync(&sub_, js_, options_.subjects.c_str(), nullptr, &so, &code);
  if (status != NATS_OK) {
    sub_ = nullptr;
    return nats::FromNats(status, "subscribe to stream '" + options_.stream + "'", code);
  }
  status = natsSubscription_SetPendingLimits(sub_, options_.pending_msgs, options_.pending_bytes);
  if (status != NATS_OK) return nats::FromNats(status, "pending limits");
  subscriptions_.fetch_add(1, std::memory_order_relaxed);
  last_progress_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

void JetStreamLogReader::FollowConnection() {
  if (!options_.current_js) return;
  jsCtx* now = options_.current_js();
  if (now == nullptr || now == js_) return;
  // A new connection: the old subscription died with the old one.
  log::Get("consume")->info("stream '{}': reading through a new NATS connection after {}",
                            options_.stream, last_returned_);
  Abandon();
  js_ = now;
}

Status JetStreamLogReader::Open(uint64_t first_position) {
  if (first_position == 0) return absl::InvalidArgumentError("log positions start at 1");
  FollowConnection();
  if (options_.prepare) KVINDEX_RETURN_IF_ERROR(options_.prepare());
  KVINDEX_ASSIGN_OR_RETURN(nats::StreamState bounds, nats::GetStreamState(js_, options_.stream));
  last_returned_ = first_position - 1;
  deferred_error_ = absl::OkStatus();
  open_target_.store(bounds.last_seq, std::memory_order_release);
  last_known_.store(std::max(bounds.last_seq, last_returned_), std::memory_order_release);
  return Subscribe(first_position);
}

bool JetStreamLogReader::Append(natsMsg* msg, LogBatch* batch) {
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg) != NATS_OK) return false;  // not a stream message
  const uint64_t position = meta->Sequence.Stream;
  const uint64_t pending = meta->NumPending;
  const int64_t stored_ns = meta->Timestamp;
  jsMsgMetaData_Destroy(meta);
  // A restarted consumer may deliver again what was already handed out.
  if (position <= last_returned_) return false;
  last_returned_ = position;
  const uint64_t known = position + pending;
  if (known > last_known_.load(std::memory_order_relaxed)) {
    last_known_.store(known, std::memory_order_release);
  }
  const std::string_view bytes(natsMsg_GetData(msg),
                               static_cast<size_t>(natsMsg_GetDataLength(msg)));
  StatusOr<codec::DecodedPlacementBatch> decoded = codec::DecodePlacementBatch(bytes);
  LogBatch::Message& message = batch->messages.emplace_back();
  message.position = position;
  if (const char* subject = natsMsg_GetSubject(msg)) message.subject = subject;
  message.stored_ns = stored_ns > 0 ? static_cast<uint64_t>(stored_ns) : 0;
  if (decoded.ok()) {
    message.header = std::move(decoded->header);
    for (PlacementEvent& event : decoded->events) batch->events.push_back(std::move(event));
  } else {
    static log::RateLimiter warnings{std::chrono::seconds(10)};
    uint64_t suppressed = 0;
    if (warnings.Allow(&suppressed)) {
      log::Get("consume")->warn("log message {} on {} does not decode: {} ({} suppressed)",
                                position, natsMsg_GetSubject(msg), decoded.status().ToString(),
                                suppressed);
    }
    message.invalid = true;
    message.header.agent = NodeOfSubject(natsMsg_GetSubject(msg));
  }
  message.end = batch->events.size();
  return true;
}

Status JetStreamLogReader::CheckStall() {
  KVINDEX_ASSIGN_OR_RETURN(nats::StreamState bounds, nats::GetStreamState(js_, options_.stream));
  if (bounds.last_seq > last_known_.load(std::memory_order_relaxed)) {
    last_known_.store(bounds.last_seq, std::memory_order_release);
  }
  last_progress_ = std::chrono::steady_clock::now();
  if (bounds.last_seq <= last_returned_) return absl::OkStatus();
  if (options_.next_by_subject) {  // the newer messages may all be other subjects'
    KVINDEX_ASSIGN_OR_RETURN(uint64_t next,
                             options_.next_by_subject(last_returned_ + 1, options_.subjects));
    if (next == 0) return absl::OkStatus();
  }
  log::Get("consume")->warn(
      "stream '{}' holds messages up to {} but delivery stalled after {}: resubscribing",
      options_.stream, bounds.last_seq, last_returned_);
  Abandon();
  return Subscribe(last_returned_ + 1);
}

Status JetStreamLogReader::Read(LogBatch* batch, size_t max_events,
                                std::chrono::milliseconds wait) {
  if (!deferred_error_.ok()) return std::exchange(deferred_error_, absl::OkStatus());
  FollowConnection();
  if (sub_ == nullptr) KVINDEX_RETURN_IF_ERROR(Subscribe(last_returned_ + 1));
  const size_t events_before = batch->events.size();
  const size_t messages_before = batch->messages.size();
  int64_t timeout = std::max<int64_t>(1, wait.count());
  while (batch->events.size() - events_before < max_events) {
    natsMsg* msg = nullptr;
    const natsStatus status = options_.next_msg ? options_.next_msg(&msg, sub_, timeout)
                                                : natsSubscription_NextMsg(&msg, sub_, timeout);
    if (status == NATS_TIMEOUT) break;
    if (status == NATS_SLOW_CONSUMER) continue;  // the ordered consumer restarts by itself
    if (status != NATS_OK) {
      Status error = nats::FromNats(status, "next log message");
      if (batch->messages.size() == messages_before) return error;
      // What was taken is handed over; the failure waits for the next call.
      deferred_error_ = std::move(error);
      break;
    }
    Append(msg, batch);
    natsMsg_Destroy(msg);
    // After the first message, take only what is already buffered.
    uint64_t queued = 0;
    if (natsSubscription_QueuedMsgs(sub_, &queued) != NATS_OK || queued == 0) break;
    timeout = 1;
  }
  const auto now = std::chrono::steady_clock::now();
  if (batch->messages.size() > messages_before) {
    last_progress_ = now;
  } else if (now - last_progress_ >= options_.stall_check) {
    return CheckStall();
  }
  return absl::OkStatus();
}

}  // namespace kvindex::consume
