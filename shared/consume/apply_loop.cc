#include "shared/consume/apply_loop.h"

#include <algorithm>

#include "shared/log/log.h"

namespace kvindex::consume {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

constexpr std::chrono::milliseconds kMaxOpenRetry{5000};

}  // namespace

ApplyLoop::ApplyLoop(LogReader* reader, index::IndexInterface* index, RouterProbe* probe,
                     ApplyOptions options)
    : reader_(reader),
      index_(index),
      probe_(probe),
      options_(std::move(options)),
      agents_(options_.agents),
      quota_(options_.agents.max_nodes) {}

ApplyLoop::~ApplyLoop() { Stop(); }

Status ApplyLoop::Start() {
  if (thread_.joinable()) return absl::OkStatus();
  if (options_.batch == 0) return absl::InvalidArgumentError("apply: batch must be > 0");
  position_.store(index_->Stats().applied_seq, std::memory_order_release);
  open_.store(false);
  stop_.store(false);
  {
    MutexLock lock(&stop_mu_);
    running_ = true;
  }
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ApplyLoop::Stop() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&stop_mu_);
    stop_.store(true);
  }
  stop_cv_.SignalAll();
  thread_.join();
  {
    MutexLock lock(&stop_mu_);
    running_ = false;
  }
  RunWriterTasks();  // one handed over as the thread ended
}

uint64_t ApplyLoop::Pending() const {
  const uint64_t last = reader_->LastKnownPosition();
  const uint64_t done = position();
  return last > done ? last - done : 0;
}

bool ApplyLoop::CaughtUp() const {
  return open_.load(std::memory_order_acquire) && position() >= reader_->OpenTarget();
}

std::vector<ApplyLoop::SourceActivity> ApplyLoop::Activity() const {
  std::vector<SourceActivity> out;
  {
    MutexLock lock(&mu_);
    out.reserve(activity_.size());
    for (const auto& [key, value] : activity_) out.push_back(value);
  }
  std::sort(out.begin(), out.end(),
            [](const SourceActivity& a, const SourceActivity& b) { return a.source < b.source; });
  return out;
}

void ApplyLoop::SleepUnlessStopping(std::chrono::milliseconds duration) {
  {
    const auto deadline = std::chrono::steady_clock::now() + duration;
    MutexLock lock(&stop_mu_);
    while (!stop_.load() && !task_pending_.load()) {
      if (!stop_cv_.WaitUntil(&stop_mu_, deadline)) break;
    }
  }
  RunWriterTasks();
}

void ApplyLoop::RunOnWriter(const std::function<void()>& task) {
  MutexLock one_at_a_time(&task_mu_);
  stop_mu_.Lock();
  if (!running_) {
    stop_mu_.Unlock();
    task();
    return;
  }
  task_ = &task;
  task_pending_.store(true);
  stop_cv_.SignalAll();
  // The writer runs it within one read wait (50 ms) or sleep; Stop runs it
  // after the thread ended (also one handed over while stopping).
  while (task_ != nullptr) task_done_cv_.Wait(&stop_mu_);
  stop_mu_.Unlock();
}

void ApplyLoop::RunWriterTasks() {
  if (!task_pending_.load(std::memory_order_acquire)) return;
  MutexLock lock(&stop_mu_);
  if (task_ == nullptr) return;
  (*task_)();
  task_ = nullptr;
  task_pending_.store(false);
  task_done_cv_.SignalAll();
}

bool ApplyLoop::OpenReader() {
  auto backoff = options_.open_retry;
  log::RateLimiter warnings{std::chrono::seconds(10)};
  while (!stop_.load()) {
    const Status status = reader_->Open(position() + 1);
    if (status.ok()) {
      open_.store(true, std::memory_order_release);
      return true;
    }
    uint64_t suppressed = 0;
    if (warnings.Allow(&suppressed)) {
      log::Get("consume")->warn("cannot open the placement log: {} (retrying; {} suppressed)",
                                status.ToString(), suppressed);
    }
    SleepUnlessStopping(backoff);
    backoff = std::min(backoff * 2, kMaxOpenRetry);
  }
  return false;
}

void ApplyLoop::Run() {
  if (!OpenReader()) return;
  LogBatch batch;
  log::RateLimiter warnings{std::chrono::seconds(10)};
  while (!stop_.load(std::memory_order_relaxed)) {
    batch.Clear();
    const Status status = reader_->Read(&batch, options_.batch, std::chrono::milliseconds(50));
    if (!status.ok()) {
      if (probe_ != nullptr) probe_->RecordLog(LogOutcome::kReadError, 1);
      uint64_t suppressed = 0;
      if (warnings.Allow(&suppressed)) {
        log::Get("consume")->warn("reading the placement log: {} ({} suppressed)",
                                  status.ToString(), suppressed);
      }
      SleepUnlessStopping(std::chrono::milliseconds(100));
      continue;
    }
    if (!batch.messages.empty()) ApplyBatch(batch);
    RunWriterTasks();
  }
}

void ApplyLoop::ApplyBatch(const LogBatch& batch) {
  RouterProbe::ApplyTally tally;
  const auto now = std::chrono::steady_clock::now();
  uint64_t stale = 0, invalid = 0, expired = 0, exhausted = 0;
  uint64_t refused[kNumLogRefusals] = {};
  for (size_t m = 0; m < batch.messages.size(); ++m) {
    const LogBatch::Message& message = batch.messages[m];
    const std::span<const PlacementEvent> events = batch.Events(m);
    if (message.invalid) ++invalid;
    if (const uint64_t expected = position() + 1;
        message.position > expected && !message.filtered) {
      // The log no longer holds what came between (retention, or a purge):
      // the senders' own numbering shows what was lost, and AgentTable
      // clears and resyncs those agents.
      log::Get("consume")->warn("placement log positions {}..{} are gone; resyncing from {}",
                                expected, message.position - 1, message.position);
      if (probe_ != nullptr) probe_->RecordLog(LogOutcome::kPositionGap, 1);
    }
    clears_.clear();
    LogRefusal refusal = LogRefusal::kBadSubject;
    const AgentTable::Verdict verdict = agents_.Admit(message, events, &clears_, &refusal);
    if (verdict != AgentTable::Verdict::kApply) {
      if (verdict == AgentTable::Verdict::kStale) {
        ++stale;
      } else {
        ++refused[static_cast<int>(refusal)];
        uint64_t suppressed = 0;
        if (refusal == LogRefusal::kTooManyNodes
                ? quota_warnings_.Allow(message.header.agent, now, &suppressed)
                : refusal_warnings_.Allow(&suppressed)) {
          log::Get("consume")->warn(
              "log position {} on '{}' (header agent '{}') refused: {} ({} suppressed)",
              message.position, message.subject, message.header.agent.substr(0, 64),
              LogRefusalLabel(refusal), suppressed);
        }
      }
      index_->ApplyMessage({}, message.position);  // the position still moves
      for (const PlacementEvent& event : events) tally.Add(event, false);
      position_.store(message.position, std::memory_order_release);
      continue;
    }
    // Usually the message's events go to the index as they are; the
    // rewritten copy exists only when something is cleared, decided or
    // filtered out.
    // The quota reads the index as it is before this message; an embedded
    // router's own agent (no subject) is trusted.
    const bool quota =
        !message.subject.empty() && !events.empty() &&
        quota_.Check(message.header.agent, events, *index_, agents_, &quota_refused_);
    if (quota) {
      ++refused[static_cast<int>(LogRefusal::kModelSourcesFull)];
      uint64_t suppressed = 0;
      if (quota_warnings_.Allow(message.header.agent, now, &suppressed)) {
        log::Get("consume")->warn(
            "log position {}: node '{}' may not add more sources to a model over 3/4 of its "
            "{} sources (its share: {}); those sources' events dropped: model_sources_full "
            "({} suppressed)",
            message.position, message.header.agent.substr(0, 64), SourceQuota::kModelSources,
            quota_.share(), suppressed);
      }
    }
    bool rewrite = !clears_.empty() || quota;
    rewritten_.clear();
    expired_sources_.clear();
    if (rewrite) rewritten_.swap(clears_);
    for (size_t i = 0; i < events.size(); ++i) {
      const PlacementEvent& event = events[i];
      expansion_.clear();
      const bool pass = agents_.Observe(event, message.position, now, &expansion_);
      if (event.kind == PlacementKind::kAgentExpired && !expansion_.empty()) {
        ++expired;
        for (const PlacementEvent& clear : expansion_) expired_sources_.push_back(clear.source);
      }
      const bool wanted = (options_.models.empty() || event.model.empty() ||
                           std::find(options_.models.begin(), options_.models.end(), event.model) !=
                               options_.models.end()) &&
                          !(quota && quota_refused_[i] != 0);
      if (!rewrite && (!pass || !wanted || !expansion_.empty())) {
        rewrite = true;
        rewritten_.insert(rewritten_.end(), events.begin(), events.begin() + i);
      }
      if (rewrite) {
        if (pass && wanted) rewritten_.push_back(event);
        rewritten_.insert(rewritten_.end(), expansion_.begin(), expansion_.end());
      }
      tally.Add(event, pass && wanted);
    }
    const std::span<const PlacementEvent> applied =
        rewrite ? std::span<const PlacementEvent>(rewritten_) : events;
    const index::ApplyResult result = index_->ApplyMessage(applied, message.position);
    if (options_.on_applied) options_.on_applied(applied);
    if (!result.status.ok()) {
      // Applied as far as memory allowed (the position still moves): what
      // is left out is never matched, so routing degrades, never lies.
      ++exhausted;
      uint64_t suppressed = 0;
      if (exhausted_warnings_.Allow(&suppressed)) {
        log::Get("consume")->warn("log position {}: {} ({} suppressed)", message.position,
                                  result.status.ToString(), suppressed);
      }
    }
    {
      MutexLock lock(&mu_);
      RecordActivity(applied, expired_sources_);
    }
    position_.store(message.position, std::memory_order_release);
  }
  if (probe_ != nullptr) {
    if (stale != 0) probe_->RecordLog(LogOutcome::kStale, stale);
    if (invalid != 0) probe_->RecordLog(LogOutcome::kInvalid, invalid);
    if (expired != 0) probe_->RecordLog(LogOutcome::kAgentExpired, expired);
    if (exhausted != 0) probe_->RecordLog(LogOutcome::kIndexExhausted, exhausted);
    for (int r = 0; r < kNumLogRefusals; ++r) {
      if (refused[r] != 0) probe_->RecordRefusal(static_cast<LogRefusal>(r), refused[r]);
    }
    uint64_t last_ts = 0;
    for (const PlacementEvent& event : batch.events)
      last_ts = std::max(last_ts, event.timestamp_ns);
    const uint64_t wall = NowNs();
    const double lag =
        last_ts != 0 && wall > last_ts ? static_cast<double>(wall - last_ts) / 1e9 : 0.0;
    probe_->RecordApply(tally, batch.messages.back().position, lag);
  }
}

void ApplyLoop::RecordActivity(std::span<const PlacementEvent> applied,
                               std::span<const SourceKey> expired) {
  SourceActivity* last = nullptr;  // stable: no insertion until it is reset
  for (const PlacementEvent& event : applied) {
    if (event.kind == PlacementKind::kHeartbeat) {
      last = nullptr;
      for (const SourceKey& source : event.sources) {
        auto& entry = activity_[source];
        entry.source = source;
        entry.agent = event.agent;
        entry.live = true;
        entry.endpoint.clear();
        entry.endpoint_model.clear();
      }
      for (const SourceEndpoint& announced : event.endpoints) {
        auto it = activity_.find(announced.source);
        if (it == activity_.end()) continue;  // not listed: refused before (AgentTable)
        it->second.endpoint = announced.address;
        it->second.endpoint_model = announced.model;
      }
      continue;
    }
    if (event.kind == PlacementKind::kWorkerExpired) {
      last = nullptr;
      for (auto& [key, entry] : activity_) {
        if (key.worker != event.source.worker) continue;
        entry.live = false;
        entry.cleared = true;
        entry.endpoint.clear();
      }
      continue;
    }
    if (event.kind != PlacementKind::kStored && event.kind != PlacementKind::kRemoved &&
        event.kind != PlacementKind::kCleared) {
      continue;
    }
    // Consecutive events usually come from the same source (one engine
    // batch): skip the hash lookup then.
    if (last == nullptr || !(last->source == event.source)) {
      last = &activity_[event.source];
      last->source = event.source;
    }
    SourceActivity& entry = *last;
    if (!event.model.empty()) entry.model = event.model;
    if (!event.agent.empty()) entry.agent = event.agent;
    // A clear before anything else is the agent's start-up clear (or one the
    // router added), not an engine event: the source has no last event
    // until its engine speaks.
    if (event.kind != PlacementKind::kCleared || entry.last_event_ns != 0) {
      entry.last_event_ns = std::max(entry.last_event_ns, event.timestamp_ns);
    }
    entry.events += 1;
    if (event.kind == PlacementKind::kCleared) entry.cleared = true;
    if (event.kind == PlacementKind::kStored) entry.cleared = false;
  }
  // An expired agent's sources hold nothing and belong to nobody: no row
  // (GET /v1/workers lists no cleared source without a live agent anyway),
  // so the table holds what is live or indexed, not every source ever seen.
  for (const SourceKey& source : expired) activity_.erase(source);
}

}  // namespace kvindex::consume
