#include "shared/consume/apply_loop.h"

#include <algorithm>
#include <chrono>

namespace kvindex::consume {
namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

ApplyLoop::ApplyLoop(InProcessSink* sink, index::IndexInterface* index, RouterProbe* probe,
                     ApplyOptions options)
    : sink_(sink), index_(index), probe_(probe), options_(std::move(options)) {}

ApplyLoop::~ApplyLoop() { Stop(); }

Status ApplyLoop::Start() {
  if (thread_.joinable()) return absl::OkStatus();
  if (options_.batch == 0) return absl::InvalidArgumentError("apply: batch must be > 0");
  next_position_ = index_->Stats().applied_seq + 1;
  stop_.store(false);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ApplyLoop::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  thread_.join();
}

uint64_t ApplyLoop::Pending() const {
  const uint64_t published = sink_->published();
  const uint64_t done = processed();
  return published > done ? published - done : 0;
}

bool ApplyLoop::CaughtUp() const { return Pending() == 0; }

std::vector<ApplyLoop::SourceActivity> ApplyLoop::Activity() const {
  std::vector<SourceActivity> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(activity_.size());
    for (const auto& [key, value] : activity_) out.push_back(value);
  }
  std::sort(out.begin(), out.end(),
            [](const SourceActivity& a, const SourceActivity& b) { return a.source < b.source; });
  return out;
}

void ApplyLoop::Run() {
  std::vector<PlacementEvent> batch;
  batch.reserve(options_.batch);
  while (!stop_.load(std::memory_order_relaxed)) {
    batch.clear();
    const size_t n = sink_->Drain(&batch, options_.batch, std::chrono::milliseconds(50));
    if (n == 0) continue;
    RouterProbe::ApplyTally tally;
    for (const PlacementEvent& event : batch) {
      const uint64_t position = next_position_++;
      bool wanted = options_.models.empty() || event.model.empty() ||
                    std::find(options_.models.begin(), options_.models.end(), event.model) !=
                        options_.models.end();
      bool applied = false;
      if (wanted) {
        applied = index_->Apply(event, position);
      } else {
        // Keep the position moving so applied_seq still tracks the log.
        PlacementEvent heartbeat;
        heartbeat.kind = PlacementKind::kHeartbeat;
        heartbeat.agent = event.agent;
        index_->Apply(heartbeat, position);
      }
      tally.Add(event, applied);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      SourceActivity* last = nullptr;  // stable: no insertion until it is reset
      for (const PlacementEvent& event : batch) {
        if (event.kind == PlacementKind::kHeartbeat) {
          last = nullptr;
          for (const SourceKey& source : event.sources) {
            auto& entry = activity_[source];
            entry.source = source;
            entry.agent = event.agent;
          }
          continue;
        }
        if (event.kind == PlacementKind::kWorkerExpired) continue;
        // Consecutive events usually come from the same source (one engine
        // batch): skip the hash lookup then.
        if (last == nullptr || !(last->source == event.source)) {
          last = &activity_[event.source];
          last->source = event.source;
        }
        SourceActivity& entry = *last;
        if (!event.model.empty()) entry.model = event.model;
        if (!event.agent.empty()) entry.agent = event.agent;
        entry.last_event_ns = std::max(entry.last_event_ns, event.timestamp_ns);
        entry.events += 1;
      }
    }
    processed_.fetch_add(n, std::memory_order_release);
    if (probe_ != nullptr) {
      const uint64_t last_ts = batch.back().timestamp_ns;
      const uint64_t now = NowNs();
      const double lag =
          last_ts != 0 && now > last_ts ? static_cast<double>(now - last_ts) / 1e9 : 0.0;
      probe_->RecordApply(tally, next_position_ - 1, lag);
    }
  }
}

}  // namespace kvindex::consume
