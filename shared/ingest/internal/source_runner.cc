#include "shared/ingest/internal/source_runner.h"

#include "shared/ingest/internal/zmq_util.h"
#include "shared/log/log.h"

namespace kvindex::ingest::internal {
namespace {

constexpr std::chrono::milliseconds kPollInterval{100};
// Messages handled per wake-up before metrics are synced again.
constexpr int kMaxMessagesPerWake = 1024;

}  // namespace

Status SourceRunner::Open(const SourceRunnerEnv& env) {
  try {
    sub = std::make_unique<zmq::socket_t>(*env.context, zmq::socket_type::sub);
    sub->set(zmq::sockopt::linger, 0);
    sub->set(zmq::sockopt::rcvhwm, env.options->receive_hwm);
    sub->set(zmq::sockopt::subscribe, "");
    sub->set(zmq::sockopt::maxmsgsize, env.options->max_message_bytes);
  } catch (const zmq::error_t& error) {
    return ZmqError(error, "SUB socket for " + label);
  }
  KVINDEX_RETURN_IF_ERROR(sub_monitor.Attach(*env.context, *sub));
  KVINDEX_RETURN_IF_ERROR(Attach(*sub, spec.pub_endpoint, spec.pub_bind));
  if (!spec.replay_endpoint.empty()) {
    replay = std::make_unique<ZmqReplayClient>(
        env.context,
        ReplayClientOptions{.endpoint = spec.replay_endpoint,
                            .timeout = env.options->replay_timeout,
                            .max_message_bytes = env.options->max_message_bytes},
        env.stop, &counters);
  }
  return absl::OkStatus();
}

void SourceRunner::Run(const SourceRunnerEnv& env) {
  session->StartupReplay();
  ready.store(true);
  metrics->Sync(stats, counters, true);
  Multipart message;
  while (!env.stop->load(std::memory_order_relaxed)) {
    env.pause->Park(*env.stop);
    if (env.stop->load()) break;
    StatusOr<bool> readable = WaitReadable(*sub, kPollInterval);
    if (!readable.ok()) {
      uint64_t suppressed = 0;
      if (env.io_warnings->Allow(&suppressed)) {
        log::Get("ingest")->warn("source {}: {} ({} suppressed)", label,
                                 readable.status().ToString(), suppressed);
      }
      env.wait(kPollInterval);
      continue;
    }
    if (!*readable) DrainDisconnects(env);
    if (snapshot_wanted.exchange(false)) env.publish_snapshot(this);
    for (int i = 0; *readable && i < kMaxMessagesPerWake && !env.stop->load(); ++i) {
      StatusOr<bool> received = ReceiveMultipart(*sub, &message);
      if (!received.ok() || !*received) break;
      if (message.oversized) {
        counters.frames_invalid[static_cast<int>(FrameError::kFrameCount)].fetch_add(
            1, std::memory_order_relaxed);
        continue;
      }
      session->OnLiveFrames(message.frames);
    }
    DrainDisconnects(env);
    ReportCapped(env);
    metrics->Sync(stats, counters, true);
  }
}

// Counts the SUB connections libzmq dropped (a message over
// max_message_bytes, or the engine went away), with a rate-limited line.
void SourceRunner::DrainDisconnects(const SourceRunnerEnv& env) {
  const uint64_t lost = sub_monitor.Drain();
  if (lost == 0) return;
  sub_disconnects_ += lost;
  metrics->SyncDisconnects(sub_disconnects_);
  // libzmq does not reconnect after a protocol error (an oversized message
  // is one): connect again, or the source would stay silent for good.
  // Harmless after an ordinary disconnect. A bound SUB waits for the
  // engine to reconnect, which it does.
  if (!spec.pub_bind) {
    try {
      sub->disconnect(spec.pub_endpoint);
    } catch (const zmq::error_t&) {
      // Not connected any more: nothing to undo.
    }
    if (Status status = Attach(*sub, spec.pub_endpoint, false); !status.ok()) {
      log::Get("ingest")->warn("source {}: reconnect failed: {}", label, status.ToString());
    }
  }
  uint64_t suppressed = 0;
  if (env.io_warnings->Allow(&suppressed)) {
    log::Get("ingest")->warn(
        "source {}: the engine connection dropped (a message over {} bytes, or the engine "
        "went away); {} so far ({} lines suppressed)",
        label, env.options->max_message_bytes, sub_disconnects_, suppressed);
  }
}

// A rate-limited line when stored events hit the per-tier block cap (the
// count itself is in kvindex_agent_events_dropped_total{reason="block_cap"}).
void SourceRunner::ReportCapped(const SourceRunnerEnv& env) {
  const uint64_t capped =
      stats.dropped[static_cast<int>(DropReason::kBlockCap)].load(std::memory_order_relaxed);
  if (capped == capped_reported_) return;
  uint64_t suppressed = 0;
  if (env.cap_warnings->Allow(&suppressed)) {
    log::Get("ingest")->warn(
        "source {}: {} blocks not indexed so far: the source holds {} blocks on a tier "
        "(--max-blocks-per-tier) ({} lines suppressed)",
        label, capped, env.options->max_blocks_per_tier, suppressed);
    capped_reported_ = capped;
  }
}

void SourceRunner::Close() {
  ready.store(false);
  session.reset();
  replay.reset();
  sub_monitor.Detach();
  sub.reset();  // linger 0: closes at once
}

}  // namespace kvindex::ingest::internal
