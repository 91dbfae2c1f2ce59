#include "shared/publish/jetstream_publisher.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "shared/log/log.h"

namespace kvindex {
namespace {

uint64_t WallClockNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Encoded size of one event, at most: what batches (kept under max_payload)
// and the buffer are counted in. An estimate below the encoding let a batch
// of many small events outgrow max_payload, a message the client refuses to
// send, for ever (the agent then silent, expired by every router).
size_t EstimateBytes(const PlacementEvent& event) { return codec::EncodedEventBound(event); }

constexpr char kMsgIdHeader[] = "Nats-Msg-Id";
// Room left in a message for its header (message id) and msgpack framing.
constexpr size_t kMessageHeadroom = 8 << 10;
// The server's max_payload when it is not known yet (nats-server's default).
constexpr int64_t kDefaultMaxPayload = 1 << 20;
// Overflowed sources still dirty are asked for again after this long.
constexpr std::chrono::seconds kResyncRetry{5};
// Metric labels of JetStreamPublisher::Failure, in its order.
constexpr std::array<const char*, 5> kFailureNames = {"timeout", "unavailable", "no_stream",
                                                      "limits", "refused"};
// How long Stop waits for acknowledgement callbacks already running.
constexpr std::chrono::seconds kCallbackDrain{10};

int64_t MillisUntil(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                               std::chrono::steady_clock::now())
      .count();
}

}  // namespace

struct JetStreamPublisher::Probe {
  explicit Probe(prometheus::Registry* registry) {
    if (registry == nullptr) return;
    auto counter = [&](const char* name, const char* help) {
      return &prometheus::BuildCounter().Name(name).Help(help).Register(*registry).Add({});
    };
    sent = counter("kvindex_agent_nats_messages_sent_total",
                   "Placement messages sent to JetStream (retries included)");
    acked = counter("kvindex_agent_nats_messages_acked_total",
                    "Placement messages acknowledged by JetStream");
    retried = counter("kvindex_agent_nats_messages_retried_total",
                      "Placement messages sent again after a failed or missing acknowledgement");
    events = counter("kvindex_agent_nats_events_published_total",
                     "Placement events queued for JetStream");
    overflow = counter("kvindex_agent_nats_events_overflowed_total",
                       "Placement events dropped because the publish buffer was full "
                       "(their sources are republished as snapshots)");
    resyncs = counter("kvindex_agent_nats_resync_requests_total",
                      "Snapshot requests the publisher made (after overflow, retries or loss)");
    lost = counter("kvindex_agent_nats_messages_lost_total",
                   "Placement messages JetStream answered 'duplicate' to on their first send "
                   "(their id was taken by another publisher): their sources are cleared and "
                   "republished as snapshots");
    auto& failure_family = prometheus::BuildCounter()
                               .Name("kvindex_agent_nats_publish_failures_total")
                               .Help(
                                   "Negative or missing acknowledgements of placement "
                                   "messages, by reason")
                               .Register(*registry);
    for (size_t i = 0; i < kFailureNames.size(); ++i) {
      failures[i] = &failure_family.Add({{"reason", kFailureNames[i]}});
    }
    auto& check_family = prometheus::BuildCounter()
                             .Name("kvindex_agent_nats_stream_checks_total")
                             .Help(
                                 "Stream checks after a failure that needs the stream to "
                                 "change, by result")
                             .Register(*registry);
    checks_ok = &check_family.Add({{"result", "ok"}});
    checks_failed = &check_family.Add({{"result", "error"}});
    backoff = &prometheus::BuildGauge()
                   .Name("kvindex_agent_nats_retry_backoff_seconds")
                   .Help(
                       "Current pause before placement messages are sent again after a "
                       "failure (0 while acknowledgements arrive)")
                   .Register(*registry)
                   .Add({});
    buffered = &prometheus::BuildGauge()
                    .Name("kvindex_agent_nats_buffered_bytes")
                    .Help("Bytes of placement events queued and not acknowledged yet")
                    .Register(*registry)
                    .Add({});
    latency = &prometheus::BuildHistogram()
                   .Name("kvindex_agent_nats_publish_latency_seconds")
                   .Help("Time from sealing a placement message to its JetStream acknowledgement")
                   .Register(*registry)
                   .Add({}, prometheus::Histogram::BucketBoundaries{
                                0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5});
  }
  static void Inc(prometheus::Counter* c, double v = 1) {
    if (c != nullptr) c->Increment(v);
  }
  prometheus::Counter* sent = nullptr;
  prometheus::Counter* acked = nullptr;
  prometheus::Counter* retried = nullptr;
  prometheus::Counter* events = nullptr;
  prometheus::Counter* overflow = nullptr;
  prometheus::Counter* resyncs = nullptr;
  prometheus::Counter* lost = nullptr;
  std::array<prometheus::Counter*, kFailureNames.size()> failures{};
  prometheus::Counter* checks_ok = nullptr;
  prometheus::Counter* checks_failed = nullptr;
  prometheus::Gauge* backoff = nullptr;
  prometheus::Gauge* buffered = nullptr;
  prometheus::Histogram* latency = nullptr;
};

Status JetStreamPublisherOptions::Validate() const {
  if (node.empty()) return absl::InvalidArgumentError("publisher: node id is empty");
  KVINDEX_RETURN_IF_ERROR(nats::ValidatePrefix(subjects.prefix));
  if (max_batch_bytes < 1024) {
    return absl::InvalidArgumentError("publisher: max batch bytes must be >= 1024");
  }
  if (max_in_flight == 0) return absl::InvalidArgumentError("publisher: max in flight is 0");
  if (buffer_bytes < max_batch_bytes) {
    return absl::InvalidArgumentError("publisher: buffer bytes must be >= max batch bytes");
  }
  if (ack_timeout.count() <= 0) return absl::InvalidArgumentError("publisher: ack timeout <= 0");
  if (retry_backoff_min.count() <= 0 || retry_backoff_max < retry_backoff_min) {
    return absl::InvalidArgumentError("publisher: retry backoff must be 0 < min <= max");
  }
  return absl::OkStatus();
}

JetStreamPublisher::JetStreamPublisher(natsConnection* connection,
                                       JetStreamPublisherOptions options,
                                       prometheus::Registry* registry)
    : connection_(connection),
      options_(std::move(options)),
      probe_(std::make_unique<Probe>(registry)) {
  if (options_.incarnation == 0) options_.incarnation = WallClockNs();
}

JetStreamPublisher::~JetStreamPublisher() { Stop(); }

void JetStreamPublisher::SetResyncHandler(std::function<void(const ResyncRequest&)> handler) {
  resync_handler_ = std::move(handler);
}

Status JetStreamPublisher::Start() {
  if (sender_.joinable()) return absl::OkStatus();
  KVINDEX_RETURN_IF_ERROR(options_.Validate());
  if (options_.current_connection) connection_ = options_.current_connection();
  KVINDEX_RETURN_IF_ERROR(MakeContext());
  // A message over the server's max_payload would be refused, and retried,
  // forever: batches stay below it, and larger events are split.
  int64_t max_payload = natsConnection_GetMaxPayload(connection_);
  if (max_payload <= 0) max_payload = kDefaultMaxPayload;
  batch_limit_ =
      std::min(options_.max_batch_bytes,
               static_cast<size_t>(max_payload) -
                   std::min<size_t>(kMessageHeadroom, static_cast<size_t>(max_payload) / 2));
  {
    MutexLock lock(&mu_);
    stopping_ = false;
    running_ = true;
    window_ = options_.max_in_flight;
  }
  sender_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

Status JetStreamPublisher::MakeContext() {
  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.PublishAsync.MaxPending = static_cast<int64_t>(options_.max_in_flight) * 2;
  js_options.PublishAsync.AckHandler = &JetStreamPublisher::OnAck;
  js_options.PublishAsync.AckHandlerClosure = this;
  const natsStatus status = natsConnection_JetStream(&js_, connection_, &js_options);
  if (status != NATS_OK) {
    js_ = nullptr;
    return absl::InternalError(std::string("JetStream context: ") + natsStatus_GetText(status));
  }
  return absl::OkStatus();
}

void JetStreamPublisher::RebindLocked(natsConnection* next) {
  mu_.Unlock();
  if (js_ != nullptr) {
    // The old connection is closed: take back what its context still tracks
    // (no callback for those any more), wait for callbacks already running.
    natsMsgList pending{};
    if (handed_any_ && js_PublishAsyncGetPendingList(&pending, js_) == NATS_OK) {
      natsMsgList_Destroy(&pending);
    }
    jsPubOptions wait;
    jsPubOptions_Init(&wait);
    wait.MaxWait = std::chrono::milliseconds(kCallbackDrain).count();
    js_PublishAsyncComplete(js_, &wait);
    jsCtx_Destroy(js_);
    js_ = nullptr;
  }
  handed_any_ = false;
  connection_ = next;
  const Status made = MakeContext();
  mu_.Lock();
  if (!made.ok()) {
    log::Get("publish")->error("new NATS connection: {}", made.ToString());
    return;
  }
  // Nothing sent on the old connection will be answered: send it again
  // (same ids; JetStream drops what had landed), then snapshot everything.
  const bool had_in_flight = in_flight_ > 0;
  for (Outgoing& out : outbox_) out.in_flight = false;
  in_flight_ = 0;
  if (had_in_flight) {
    FailRoundLocked(Failure::kUnavailable, outbox_.front().msg_seq, "NATS connection replaced");
  }
  resync_all_ = true;
  log::Get("publish")->info("publishing on a new NATS connection; {} message(s) to send again",
                            outbox_.size());
}

void JetStreamPublisher::Stop() { StopAndDrain(std::chrono::steady_clock::now()); }

Status JetStreamPublisher::Shutdown(std::chrono::steady_clock::time_point deadline) {
  if (!sender_.joinable()) return absl::OkStatus();
  {
    MutexLock lock(&mu_);
    SealDueLocked(true);
    const uint64_t target = next_msg_seq_ - 1;
    wake_.Signal();
    while (!outbox_.empty() && outbox_.front().msg_seq <= target &&
           std::chrono::steady_clock::now() < deadline) {
      progress_.WaitUntil(&mu_, deadline);
    }
  }
  const size_t dropped = StopAndDrain(deadline);
  if (dropped == 0) return absl::OkStatus();
  return absl::DeadlineExceededError("JetStream publisher: " + std::to_string(dropped) +
                                     " placement messages not acknowledged by the deadline");
}

size_t JetStreamPublisher::StopAndDrain(std::chrono::steady_clock::time_point deadline) {
  if (!sender_.joinable()) return 0;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  progress_.SignalAll();
  sender_.join();
  // Nothing is sent any more. The client library calls OnAck with `this`
  // for every message it still tracks: wait for those answers until the
  // deadline, take the rest back (no callback for them any more), then wait
  // for callbacks already running (the library counts one as pending until
  // it returned).
  if (js_ != nullptr) {
    jsPubOptions wait;
    jsPubOptions_Init(&wait);
    if (const int64_t left = MillisUntil(deadline); left > 0) {
      wait.MaxWait = left;
      js_PublishAsyncComplete(js_, &wait);
    }
    // (cnats 3.4 dereferences its pending map, created by the first async
    // publish, without a check: never ask before one.)
    natsMsgList pending{};
    if (handed_any_ && js_PublishAsyncGetPendingList(&pending, js_) == NATS_OK) {
      natsMsgList_Destroy(&pending);
    }
    wait.MaxWait = std::chrono::milliseconds(kCallbackDrain).count();
    if (js_PublishAsyncComplete(js_, &wait) != NATS_OK) {
      log::Get("publish")->error("an acknowledgement callback did not return within {} s",
                                 kCallbackDrain.count());
    }
  }
  size_t unacked = 0;
  {
    MutexLock lock(&mu_);
    running_ = false;
    for (const Outgoing& out : outbox_) unacked += out.acked ? 0 : 1;
    for (const auto& [subject, batch] : open_) unacked += batch.events.empty() ? 0 : 1;
  }
  if (unacked > 0) {
    log::Get("publish")->warn("stopping with {} placement messages not acknowledged", unacked);
  }
  jsCtx_Destroy(js_);
  js_ = nullptr;
  return unacked;
}

std::string JetStreamPublisher::SubjectFor(const PlacementEvent& event) const {
  if (event.model.empty()) return options_.subjects.Agent(options_.node);
  return options_.subjects.Events(event.model, options_.node);
}

Status JetStreamPublisher::Publish(std::span<const PlacementEvent> events) {
  {
    MutexLock lock(&mu_);
    if (stopping_ || !running_) {
      return absl::FailedPreconditionError("JetStream publisher is stopped");
    }
    PublishLocked(events);
  }
  wake_.Signal();
  return absl::OkStatus();
}

void JetStreamPublisher::PublishLocked(std::span<const PlacementEvent> events) {
  const auto now = std::chrono::steady_clock::now();
  uint64_t overflowed = 0;
  for (const PlacementEvent& event : events) {
    const bool sourced = event.kind == PlacementKind::kStored ||
                         event.kind == PlacementKind::kRemoved ||
                         event.kind == PlacementKind::kCleared;
    if (sourced && !overflowed_.empty() && overflowed_.contains(event.source)) {
      if (event.kind != PlacementKind::kCleared) {
        ++overflowed;
        continue;
      }
      // A clear starts the source afresh (a snapshot, or an engine restart).
      overflowed_.erase(event.source);
      requested_.erase(event.source);
    }
    const size_t bytes = EstimateBytes(event);
    const bool control = !sourced;  // heartbeats: tiny, never dropped
    if (!control && event.kind != PlacementKind::kCleared &&
        BufferedLocked() + bytes > options_.buffer_bytes) {
      ++overflowed;
      OverflowLocked(event, now);
      static log::RateLimiter warnings{std::chrono::seconds(10)};
      uint64_t suppressed = 0;
      if (warnings.Allow(&suppressed)) {
        log::Get("publish")->warn(
            "publish buffer full ({} bytes): source {}:{} dropped until its snapshot ({} "
            "suppressed)",
            options_.buffer_bytes, event.source.worker, event.source.dp_rank, suppressed);
      }
      continue;
    }
    if (bytes > batch_limit_ / 2 && !event.block_hashes.empty()) {
      AppendSplitLocked(event, now);
    } else {
      AppendLocked(event, bytes, now);
    }
  }
  Probe::Inc(probe_->events, static_cast<double>(events.size() - overflowed));
  Probe::Inc(probe_->overflow, static_cast<double>(overflowed));
}

void JetStreamPublisher::OverflowLocked(const PlacementEvent& event,
                                        std::chrono::steady_clock::time_point now) {
  overflowed_.insert(event.source);
  requested_.erase(event.source);
  // Fail closed now: routers drop the source until its snapshot arrives.
  PlacementEvent clear;
  clear.kind = PlacementKind::kCleared;
  clear.model = event.model;
  clear.source = event.source;
  clear.agent = event.agent;
  clear.event_id = event.event_id;
  clear.timestamp_ns = event.timestamp_ns;
  AppendLocked(clear, EstimateBytes(clear), now);
}

void JetStreamPublisher::AppendSplitLocked(const PlacementEvent& event,
                                           std::chrono::steady_clock::time_point now) {
  // Consecutive pieces of one chain: each piece's parent is the block
  // before it, so a router applies exactly what the whole event meant.
  // SGLang's engine hashes, when they ride along, are split with theirs.
  const bool sglang =
      !event.sglang_hashes.empty() && event.sglang_hashes.size() == event.block_hashes.size();
  PlacementEvent piece = event;
  if (!sglang) piece.sglang_hashes.clear();  // malformed: not published
  // Each piece within half a batch: its fields, and 9 bytes per hash at most.
  const size_t per_hash = sglang ? 18 : 9;
  const size_t fixed = EstimateBytes(piece) - per_hash * event.block_hashes.size();
  const size_t per_piece =
      std::max<size_t>(1, (batch_limit_ / 2 - std::min(batch_limit_ / 4, fixed)) / per_hash);
  for (size_t begin = 0; begin < event.block_hashes.size(); begin += per_piece) {
    const size_t end = std::min(event.block_hashes.size(), begin + per_piece);
    piece.block_hashes.assign(event.block_hashes.begin() + begin, event.block_hashes.begin() + end);
    if (sglang) {
      piece.sglang_hashes.assign(event.sglang_hashes.begin() + begin,
                                 event.sglang_hashes.begin() + end);
    }
    if (begin != 0 && event.kind == PlacementKind::kStored) {
      piece.parent_hash = event.block_hashes[begin - 1];
    }
    AppendLocked(piece, EstimateBytes(piece), now);
  }
}

void JetStreamPublisher::AppendLocked(const PlacementEvent& event, size_t bytes,
                                      std::chrono::steady_clock::time_point now) {
  const std::string subject = SubjectFor(event);
  OpenBatch& batch = open_[subject];
  if (!batch.events.empty() && batch.bytes + bytes > batch_limit_) SealLocked(subject, batch);
  if (batch.events.empty()) batch.first = now;
  batch.events.push_back(event);
  batch.bytes += bytes;
  open_bytes_ += bytes;
  if (batch.bytes >= batch_limit_) SealLocked(subject, batch);
}

void JetStreamPublisher::SealLocked(const std::string& subject, OpenBatch& batch) {
  if (batch.events.empty()) return;
  Outgoing& out = outbox_.emplace_back();
  out.msg_seq = next_msg_seq_++;
  out.subject = subject;
  codec::EncodePlacementBatch(batch.events, &out.data,
                              {.agent = options_.node,
                               .incarnation = options_.incarnation,
                               .msg_seq = out.msg_seq,
                               .subject_seq = batch.next_subject_seq++});
  out.sealed = std::chrono::steady_clock::now();
  outbox_bytes_ += out.data.size();
  open_bytes_ -= batch.bytes;
  batch.events.clear();
  batch.bytes = 0;
}

void JetStreamPublisher::SealDueLocked(bool all) {
  const auto now = std::chrono::steady_clock::now();
  // Seal in the order batches were opened, so per-source event order holds
  // across subjects too (a source's events all share one subject anyway).
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> due;
  for (auto& [subject, batch] : open_) {
    if (!batch.events.empty() && (all || now - batch.first >= options_.max_delay)) {
      due.emplace_back(batch.first, subject);
    }
  }
  std::sort(due.begin(), due.end());
  for (const auto& [first, subject] : due) SealLocked(subject, open_[subject]);
}

bool JetStreamPublisher::SendOneLocked() {
  if (retry_pending_) {
    if (std::chrono::steady_clock::now() < retry_at_) return false;  // backing off
    // Resend everything unacknowledged, in order, with the same ids.
    retry_pending_ = false;
    for (Outgoing& out : outbox_) {
      if (!out.acked && out.in_flight) {
        out.in_flight = false;
        --in_flight_;
      }
    }
  }
  if (in_flight_ >= std::min(window_, options_.max_in_flight)) return false;
  Outgoing* next = nullptr;
  for (Outgoing& out : outbox_) {
    if (!out.acked && !out.in_flight) {
      next = &out;
      break;
    }
  }
  if (next == nullptr) return false;
  const bool retry = next->sent != std::chrono::steady_clock::time_point{};
  next->in_flight = true;
  next->sent = std::chrono::steady_clock::now();
  ++next->sends;  // before the lock is released: its answer may come first
  ++in_flight_;
  char id[160];
  std::snprintf(id, sizeof(id), "%s:%llu:%llu", options_.node.c_str(),
                static_cast<unsigned long long>(options_.incarnation),
                static_cast<unsigned long long>(next->msg_seq));
  // The message copies the payload; the lock is released while sending.
  natsMsg* msg = nullptr;
  natsStatus status = natsMsg_Create(&msg, next->subject.c_str(), nullptr, next->data.data(),
                                     static_cast<int>(next->data.size()));
  mu_.Unlock();
  if (status == NATS_OK) status = natsMsgHeader_Set(msg, kMsgIdHeader, id);
  if (status == NATS_OK) {
    jsPubOptions pub;
    jsPubOptions_Init(&pub);
    pub.MaxWait = options_.ack_timeout.count();
    status = js_PublishMsgAsync(js_, &msg, &pub);
    handed_any_ = true;  // the library's pending map exists (sender thread only)
  }
  natsMsg_Destroy(msg);  // no-op when the library took it
  Probe::Inc(probe_->sent);
  if (retry) Probe::Inc(probe_->retried);
  mu_.Lock();
  if (status != NATS_OK) {
    // Said (a message the client never sends, e.g. one over max_payload,
    // would otherwise stall this agent without a word).
    static log::RateLimiter warnings{std::chrono::seconds(10)};
    uint64_t suppressed = 0;
    if (warnings.Allow(&suppressed)) {
      log::Get("publish")->warn("placement message {} ({} bytes) not sent: {} ({} suppressed)",
                                next->msg_seq, next->data.size(), natsStatus_GetText(status),
                                suppressed);
    }
    // Not sent: it stays first in line and is tried again after a pause.
    // (`next` is still valid: a deque keeps references on push_back, and an
    // unsent message is never acknowledged, so never popped.)
    --next->sends;
    if (next->in_flight) {
      next->in_flight = false;
      --in_flight_;
    }
    return false;
  }
  return true;
}

JetStreamPublisher::Failure JetStreamPublisher::Classify(natsStatus status, jsErrCode code) {
  if (status == NATS_TIMEOUT) return Failure::kTimeout;
  if (status == NATS_NO_RESPONDERS) return Failure::kNoStream;  // no stream takes the subject
  switch (code) {
    case JSStreamNotFoundErr:
    case JSStreamOfflineErr:
      return Failure::kNoStream;
    case JSStreamStoreFailedErr:  // "maximum messages/bytes exceeded" (discard new)
    case JSStorageResourcesExceededErr:
    case JSMemoryResourcesExceededErr:
    case JSInsufficientResourcesErr:
    case JSAccountResourcesExceededErr:
    case JSStreamLimitsErr:
    case JSStreamMaxStreamBytesExceededErr:
      return Failure::kLimits;
    case JSClusterNotAvailErr:
    case JSClusterNotLeaderErr:
      return Failure::kUnavailable;
    default:
      break;
  }
  // No JetStream answer at all (connection lost, closed): transient.
  return static_cast<int>(code) == 0 ? Failure::kUnavailable : Failure::kRefused;
}

void JetStreamPublisher::OnAck(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr* error,
                               void* closure) {
  auto* self = static_cast<JetStreamPublisher*>(closure);
  if (self->options_.ack_observer) self->options_.ack_observer();
  Ack answer;
  answer.ok = ack != nullptr && error == nullptr;
  answer.duplicate = answer.ok && ack->Duplicate;
  if (error != nullptr) {
    answer.failure = Classify(error->Err, error->ErrCode);
    answer.error_text = error->ErrText != nullptr ? error->ErrText : natsStatus_GetText(error->Err);
  }
  self->HandleAck(msg, answer);
  natsMsg_Destroy(msg);
}

void JetStreamPublisher::HandleAck(natsMsg* msg, const Ack& ack) {
  const char* id = nullptr;
  if (msg == nullptr || natsMsgHeader_Get(msg, kMsgIdHeader, &id) != NATS_OK || id == nullptr) {
    return;
  }
  const std::string_view text(id);
  const size_t colon = text.rfind(':');
  uint64_t msg_seq = 0;
  std::from_chars(text.data() + colon + 1, text.data() + text.size(), msg_seq);
  if (!RecordAck(msg_seq, ack)) return;
  wake_.Signal();
  progress_.SignalAll();
}

bool JetStreamPublisher::RecordAck(uint64_t msg_seq, const Ack& ack) {
  MutexLock lock(&mu_);
  if (outbox_.empty() || msg_seq < outbox_.front().msg_seq) return false;
  const size_t index = static_cast<size_t>(msg_seq - outbox_.front().msg_seq);
  if (index >= outbox_.size()) return false;
  Outgoing& out = outbox_[index];
  if (out.acked || !out.in_flight) return false;  // an answer to an earlier send of it
  out.in_flight = false;
  --in_flight_;
  if (!ack.ok) {
    FailRoundLocked(ack.failure, msg_seq, ack.error_text);
    return true;
  }
  // A duplicate answer to a resend: the first send landed. To the first
  // send: JetStream held the id already, from someone else.
  const bool lost = ack.duplicate && out.sends == 1;
  if (lost) LoseLocked(out);  // appends clears: `out` stays valid (a deque)
  out.acked = true;
  window_ = options_.max_in_flight;
  backoff_ = std::chrono::milliseconds(0);
  if (!lost) {
    if (probe_->latency != nullptr) {
      probe_->latency->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - out.sealed).count());
    }
    Probe::Inc(probe_->acked);
  }
  while (!outbox_.empty() && outbox_.front().acked) {
    outbox_bytes_ -= outbox_.front().data.size();
    outbox_.pop_front();
    ++acked_;
  }
  return true;
}

void JetStreamPublisher::FailRoundLocked(Failure failure, uint64_t msg_seq,
                                         const char* error_text) {
  Probe::Inc(probe_->failures[static_cast<size_t>(failure)]);
  retry_pending_ = true;
  resync_all_ = true;
  window_ = 1;  // the next round is one probe
  if (NeedsStreamCheck(failure)) check_stream_pending_ = true;
  const auto now = std::chrono::steady_clock::now();
  if (now >= retry_at_) {  // the first failure of a round (later ones are its echoes)
    backoff_ = backoff_.count() == 0 ? options_.retry_backoff_min
                                     : std::min(backoff_ * 2, options_.retry_backoff_max);
    retry_at_ = now + backoff_;
  }
  static log::RateLimiter warnings{std::chrono::seconds(10)};
  uint64_t suppressed = 0;
  if (warnings.Allow(&suppressed)) {
    log::Get("publish")->warn(
        "placement message {} not acknowledged ({}): {} (resending in {} ms; {} suppressed)",
        msg_seq, kFailureNames[static_cast<size_t>(failure)],
        error_text != nullptr ? error_text : "unknown error", backoff_.count(), suppressed);
  }
}

void JetStreamPublisher::LoseLocked(const Outgoing& out) {
  ++lost_;
  Probe::Inc(probe_->lost);
  StatusOr<codec::DecodedPlacementBatch> decoded = codec::DecodePlacementBatch(out.data);
  size_t sources = 0;
  if (decoded.ok()) {
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<std::string_view, const SourceKey*>> seen;
    for (const PlacementEvent& event : decoded->events) {
      if (event.kind != PlacementKind::kStored && event.kind != PlacementKind::kRemoved &&
          event.kind != PlacementKind::kCleared) {
        continue;  // a heartbeat: the next one follows
      }
      const bool known = std::any_of(seen.begin(), seen.end(), [&](const auto& s) {
        return s.first == event.model && *s.second == event.source;
      });
      if (known) continue;
      seen.emplace_back(event.model, &event.source);
      OverflowLocked(event, now);
      ++sources;
    }
  } else {
    resync_all_ = true;  // cannot happen (this process encoded it); fail safe
  }
  static log::RateLimiter warnings{std::chrono::seconds(10)};
  uint64_t suppressed = 0;
  if (warnings.Allow(&suppressed)) {
    log::Get("publish")->warn(
        "placement message {} was dropped by JetStream as a duplicate, though this agent never "
        "sent it before (another publisher took its id): {} source(s) cleared and resynced "
        "({} suppressed)",
        out.msg_seq, sources, suppressed);
  }
}

void JetStreamPublisher::MaybeCheckStreamLocked() {
  if (!check_stream_pending_ || !options_.check_stream) return;
  check_stream_pending_ = false;
  mu_.Unlock();
  const Status status = options_.check_stream();
  mu_.Lock();
  Probe::Inc(status.ok() ? probe_->checks_ok : probe_->checks_failed);
  if (!status.ok()) {
    static log::RateLimiter warnings{std::chrono::seconds(10)};
    uint64_t suppressed = 0;
    if (warnings.Allow(&suppressed)) {
      log::Get("publish")->warn("stream check after a refused publish: {} ({} suppressed)",
                                status.ToString(), suppressed);
    }
  }
}

void JetStreamPublisher::MaybeRequestResyncLocked() {
  if (!resync_handler_) return;
  ResyncRequest request;
  const auto now = std::chrono::steady_clock::now();
  if (resync_all_ && outbox_.empty()) {
    resync_all_ = false;
    request.all = true;
  } else if (!overflowed_.empty() && BufferedLocked() < options_.buffer_bytes / 2) {
    if (now - last_request_ >= kResyncRetry) requested_.clear();
    for (const SourceKey& source : overflowed_) {
      if (requested_.insert(source).second) request.sources.push_back(source);
    }
  }
  if (!request.all && request.sources.empty()) return;
  last_request_ = now;
  Probe::Inc(probe_->resyncs);
  mu_.Unlock();
  resync_handler_(request);
  mu_.Lock();
}

void JetStreamPublisher::Run() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    if (options_.current_connection) {
      if (natsConnection* now = options_.current_connection(); now != connection_ && now) {
        RebindLocked(now);
        continue;
      }
    }
    SealDueLocked(false);
    // An acknowledgement the client never reported: treat it as failed.
    const auto overdue = std::chrono::steady_clock::now() - 2 * options_.ack_timeout;
    for (const Outgoing& out : outbox_) {
      if (!retry_pending_ && out.in_flight && out.sent < overdue) {
        FailRoundLocked(Failure::kTimeout, out.msg_seq, "no acknowledgement reported");
        break;
      }
    }
    // Nothing goes out before the stream exists: a message refused for a
    // missing stream while the next one is stored would reach routers out
    // of order (a gap, a needless resync).
    const bool connected = stream_ready_ && js_ != nullptr &&
                           natsConnection_Status(connection_) == NATS_CONN_STATUS_CONNECTED;
    bool sent = false;
    if (connected) {
      if (retry_pending_ && std::chrono::steady_clock::now() >= retry_at_) {
        MaybeCheckStreamLocked();
      }
      while (!stopping_ && SendOneLocked()) sent = true;
      MaybeRequestResyncLocked();
    }
    if (probe_->buffered != nullptr) probe_->buffered->Set(static_cast<double>(BufferedLocked()));
    if (probe_->backoff != nullptr) {
      probe_->backoff->Set(std::chrono::duration<double>(backoff_).count());
    }
    if (sent) continue;
    // Sleep until new work, an acknowledgement, or the next batch is due.
    auto wait = std::chrono::microseconds(connected ? 50'000 : 20'000);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [subject, batch] : open_) {
      if (batch.events.empty()) continue;
      const auto due = batch.first + options_.max_delay;
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::microseconds>(due - now));
    }
    if (retry_pending_ && retry_at_ > now) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::microseconds>(retry_at_ - now) +
                                std::chrono::microseconds(1));
    }
    if (wait.count() > 0) wake_.WaitFor(&mu_, wait);
  }
}

void JetStreamPublisher::SetStreamReady(bool ready) {
  {
    MutexLock lock(&mu_);
    stream_ready_ = ready;
  }
  wake_.SignalAll();
}

Status JetStreamPublisher::Flush() {
  MutexLock lock(&mu_);
  SealDueLocked(true);
  const uint64_t target = next_msg_seq_ - 1;
  wake_.Signal();
  while (!stopping_ && !outbox_.empty() && outbox_.front().msg_seq <= target) {
    progress_.Wait(&mu_);
  }
  if (!outbox_.empty() && outbox_.front().msg_seq <= target) {
    return absl::FailedPreconditionError("JetStream publisher stopped before the flush completed");
  }
  return absl::OkStatus();
}

size_t JetStreamPublisher::buffered_bytes() const {
  MutexLock lock(&mu_);
  return BufferedLocked();
}

uint64_t JetStreamPublisher::acked() const {
  MutexLock lock(&mu_);
  return acked_;
}

uint64_t JetStreamPublisher::lost() const {
  MutexLock lock(&mu_);
  return lost_;
}

}  // namespace kvindex
