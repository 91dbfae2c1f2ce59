// SourceSession: the per-source sequence state machine (semantics.md section
// 3, "Sequence" and "Precise rules"), between validated engine frames and the
// SourceProcessor that decodes and normalizes payloads.
//
// It owns no socket: live messages are pushed in by the caller
// (AgentPipeline's I/O thread, tests, the frame fuzzer) and replays are pulled
// through a ReplayFetcher (ZmqReplayClient in production). That keeps every
// sequence decision deterministic and testable without ZMQ.
//
//   SourceSession session(spec, options, &stats, &counters, replay, sink);
//   session.PublishStartupClear();   // "cleared" for the source
//   session.StartupReplay();         // everything from seq 0, if replay is configured
//   for (...) session.OnLiveFrames(frames);
//
// Decisions, per live batch with seq s (last = last applied seq):
//   new SGLang epoch            -> restart: clear, apply s
//   nothing applied yet         -> apply s (the first batch is never a gap)
//   s == last + 1               -> apply s
//   s <= last                   -> skip if it repeats a batch the start-up replay
//                                  applied (same seq, same payload bytes);
//                                  otherwise restart: clear, apply s
//   s >  last + 1 (gap)         -> replay [last+1, s) unless no replay socket or
//                                  in cooldown; covered -> apply s;
//                                  not covered -> clear, apply s
// Inside a replay: seqs already applied are skipped (overlap is not a
// restart); the first replayed seq after `start` means the gap cannot be
// covered; a later jump is a gap inside the stream -> clear, apply the batch.
// Every engine batch's events (including the clear that precedes it) reach
// the BatchSink in ONE PublishBatch call.
//
// Thread safety: not thread-safe; one thread drives a session (the same
// thread must call every method). `counters` are atomics others may read.
// Invariants: last_seq() only changes when a batch is applied; once
// has_seq() is true it stays true; every clear is published before the batch
// that follows it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "shared/base/status.h"
#include "shared/ingest/frames.h"
#include "shared/ingest/source_spec.h"
#include "shared/log/log.h"
#include "shared/model/placement_event.h"
#include "shared/normalize/source_processor.h"

namespace kvindex::ingest {

// Pulls a replay stream from the engine's replay socket.
class ReplayFetcher {
 public:
  virtual ~ReplayFetcher() = default;
  // Requests every buffered batch from `start_seq` on and calls `on_message`
  // for each reply (never for the end marker), in order, until it returns
  // false (the rest of the stream is abandoned). OK: end marker seen or
  // stream abandoned. DeadlineExceeded: the server stayed quiet longer than
  // the timeout. Cancelled: the owner is stopping. DataLoss: malformed reply.
  virtual Status Fetch(uint64_t start_seq,
                       absl::FunctionRef<bool(const ReplayMessage&)> on_message) = 0;
};

// Receives the placement events of one engine batch (stamps and publishes).
class BatchSink {
 public:
  virtual ~BatchSink() = default;
  // Called once per engine batch with a non-empty event list, on the
  // session's thread. May block (backpressure); must not fail.
  virtual void PublishBatch(std::vector<PlacementEvent>* events) = 0;
};

// Why a source was cleared (one metric label each).
enum class ClearCause : uint8_t {
  kStartup = 0,     // agent start
  kGapUnrecovered,  // gap the replay could not cover (or no replay socket / cooldown)
  kReplayGap,       // gap inside a replay stream
  kRestart,         // live seq <= last applied
  kEpochChange,     // new SGLang epoch
  kDecodeError,     // undecodable payload (cleared by the processor)
  kCount,
};
inline constexpr int kNumClearCauses = static_cast<int>(ClearCause::kCount);
// "startup", "gap_unrecovered", "replay_gap", "restart", "epoch_change", "decode_error".
std::string_view ClearCauseLabel(ClearCause cause);

// Counters of one source. Written by the session thread, read by anyone.
struct SessionCounters {
  std::atomic<uint64_t> frames_invalid[kNumFrameErrors] = {};
  std::atomic<uint64_t> clears[kNumClearCauses] = {};
  std::atomic<uint64_t> live_batches{0};
  std::atomic<uint64_t> replayed_batches{0};  // applied from replay
  std::atomic<uint64_t> overlap_skipped{0};   // batches skipped as already applied
  std::atomic<uint64_t> gaps{0};              // live gaps + gaps inside replay streams
  std::atomic<uint64_t> replays_ok{0};
  std::atomic<uint64_t> replays_failed{0};
  std::atomic<uint64_t> replays_skipped{0};  // gap inside the cooldown
  std::atomic<uint64_t> restarts{0};         // seq backwards/equal or new epoch
  std::atomic<uint64_t> last_seq{0};
  std::atomic<bool> has_seq{false};
  std::atomic<uint64_t> tracked_blocks{0};
};

struct SessionOptions {
  // Minimum time between the end of one gap replay attempt and the start of
  // the next; a gap inside the cooldown is unrecoverable (clear). The
  // start-up replay does not start a cooldown. Default: 1 s.
  std::chrono::milliseconds replay_cooldown{1000};
  // Replay replies accepted per attempt before giving up (the engine keeps
  // 10000). Default: 100000.
  uint64_t max_replay_batches = 100000;
  // Start-up replayed batches remembered to recognise the live stream
  // repeating them. Default: 20000.
  size_t overlap_window = 20000;
  // Clock for the cooldown; tests inject one. Default: steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> now;
};

class SourceSession {
 public:
  // `stats`, `counters`, `sink` must outlive the session; `replay` may be
  // null (no replay socket) and must outlive it otherwise.
  SourceSession(const SourceSpec& spec, SessionOptions options, normalize::SourceStats* stats,
                SessionCounters* counters, ReplayFetcher* replay, BatchSink* sink);

  SourceSession(const SourceSession&) = delete;
  SourceSession& operator=(const SourceSession&) = delete;

  // Publishes "cleared" for the source (agent start).
  void PublishStartupClear();
  // Instead of PublishStartupClear: continues from a state SaveState wrote
  // (a checkpoint of kvindex-router --embedded), whose placements the log
  // already holds. DataLoss when it does not decode (the session is then
  // fresh: the caller clears as usual).
  Status Resume(std::string_view state);
  // Replays what the engine buffered: from seq 0 for a fresh session. After
  // Resume it first asks for the last applied seq: the engine still holds
  // that very batch (same bytes) -> continue from last_seq() + 1 (a first
  // reply past it is a gap: clear, then apply); it does not (it restarted
  // while we were away: its buffer ends before, or holds other bytes there)
  // -> clear and replay from seq 0 like a fresh session; no answer -> keep
  // the state, the live stream decides. No-op without replay socket.
  // Returns true when the replay reached its end marker.
  bool StartupReplay();
  // The sequence state and the processor's state, appended to *out. Between
  // two batches, on the session's thread (or while it is parked).
  void SaveState(std::string* out) const;

  // Validates one live message (counting bad frames) and handles it.
  void OnLiveFrames(std::span<const Frame> frames);
  void OnLiveMessage(const LiveMessage& message);

  bool has_seq() const { return has_seq_; }
  uint64_t last_seq() const { return last_seq_; }
  size_t tracked_blocks() const { return processor_.tracked_blocks(); }
  const normalize::SourceProcessor& processor() const { return processor_; }

 private:
  void Apply(uint64_t seq, Frame payload, std::optional<ClearCause> clear_first);
  enum class ResumePoint { kContinue, kRestarted, kUnknown };
  ResumePoint CheckResumePoint();
  bool ReplayFrom(uint64_t start);
  bool RecoverGap(uint64_t live_seq);
  bool IsOverlap(uint64_t seq, Frame payload) const;
  void RememberReplayed(uint64_t seq, Frame payload);
  void CountClear(ClearCause cause);
  std::chrono::steady_clock::time_point Now() const;

  const SourceSpec spec_;
  const SessionOptions options_;
  normalize::SourceStats* const stats_;
  SessionCounters* const counters_;
  ReplayFetcher* const replay_;
  BatchSink* const sink_;
  normalize::SourceProcessor processor_;

  bool has_seq_ = false;
  uint64_t last_seq_ = 0;
  uint64_t last_payload_ = 0;  // XXH3 of the last applied batch's payload
  bool resumed_ = false;       // Resume ran; StartupReplay checks the resume point
  std::optional<std::string> epoch_;
  std::optional<std::chrono::steady_clock::time_point> last_replay_end_;
  // (seq, payload digest) of start-up replayed batches, increasing seq.
  std::deque<std::pair<uint64_t, uint64_t>> overlap_;
  std::vector<PlacementEvent> events_;  // reused per batch
  log::RateLimiter clear_warnings_{std::chrono::seconds(10)};
  log::RateLimiter replay_warnings_{std::chrono::seconds(10)};
};

}  // namespace kvindex::ingest
