#include "shared/ingest/source_session.h"

#include <algorithm>

#include <xxhash.h>

#include "absl/hash/hash.h"
#include "shared/base/bytes.h"
#include "shared/log/log.h"

namespace kvindex::ingest {
namespace {

uint64_t StablePayloadDigest(Frame payload) { return XXH3_64bits(payload.data(), payload.size()); }

uint64_t PayloadDigest(Frame payload) {
  return absl::Hash<std::string_view>{}(
      std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
}

normalize::SourceOptions ProcessorOptions(const SourceSpec& spec) {
  normalize::SourceOptions options;
  options.worker = spec.worker;
  options.model = spec.model;
  options.block_size = spec.block_size;
  options.engine = spec.engine;
  options.dp_rank = spec.dp_rank;
  // A socket without a declared rank serves the one rank its first envelope
  // names (SourceSpec::rank_declared); a declared one its declared range.
  options.dp_rank_limit =
      spec.rank_declared
          ? static_cast<uint32_t>(std::min<uint64_t>(
                std::max<uint64_t>(spec.dp_ranks, uint64_t{spec.dp_rank} + 1), kMaxDpRanks))
          : kMaxDpRanks;
  options.pin_first_rank = !spec.rank_declared;
  options.max_blocks_per_tier = spec.max_blocks_per_tier;
  options.report_full = spec.report_full;
  return options;
}

}  // namespace

std::string_view ClearCauseLabel(ClearCause cause) {
  switch (cause) {
    case ClearCause::kStartup:
      return "startup";
    case ClearCause::kGapUnrecovered:
      return "gap_unrecovered";
    case ClearCause::kReplayGap:
      return "replay_gap";
    case ClearCause::kRestart:
      return "restart";
    case ClearCause::kEpochChange:
      return "epoch_change";
    case ClearCause::kDecodeError:
      return "decode_error";
    case ClearCause::kCount:
      break;
  }
  return "invalid";
}

SourceSession::SourceSession(const SourceSpec& spec, SessionOptions options,
                             normalize::SourceStats* stats, SessionCounters* counters,
                             ReplayFetcher* replay, BatchSink* sink)
    : spec_(spec),
      options_(std::move(options)),
      stats_(stats),
      counters_(counters),
      replay_(replay),
      sink_(sink),
      processor_(ProcessorOptions(spec), stats) {}

std::chrono::steady_clock::time_point SourceSession::Now() const {
  return options_.now ? options_.now() : std::chrono::steady_clock::now();
}

void SourceSession::CountClear(ClearCause cause) {
  counters_->clears[static_cast<int>(cause)].fetch_add(1, std::memory_order_relaxed);
  if (cause == ClearCause::kStartup) return;
  // Rate-limited: a flapping engine must not flood the log.
  uint64_t suppressed = 0;
  if (!clear_warnings_.Allow(&suppressed)) return;
  log::Get("ingest")->warn("source {} cleared ({}), last seq {} ({} similar suppressed)",
                           SourceLabel(spec_), ClearCauseLabel(cause), last_seq_, suppressed);
}

void SourceSession::PublishStartupClear() {
  events_.clear();
  processor_.ClearAll(&events_);
  CountClear(ClearCause::kStartup);
  counters_->tracked_blocks.store(processor_.tracked_blocks(), std::memory_order_relaxed);
  if (!events_.empty()) sink_->PublishBatch(&events_);
}

namespace {
constexpr uint8_t kSessionStateVersion = 1;
}  // namespace

void SourceSession::SaveState(std::string* out) const {
  out->push_back(static_cast<char>(kSessionStateVersion));
  out->push_back(has_seq_ ? 1 : 0);
  bytes::PutVarint(out, last_seq_);
  bytes::PutFixed64(out, last_payload_);
  out->push_back(epoch_.has_value() ? 1 : 0);
  bytes::PutString(out, epoch_.value_or(""));
  processor_.SaveState(out);
}

Status SourceSession::Resume(std::string_view state) {
  bytes::Reader in(state, "saved session state");
  uint8_t version = 0, has_seq = 0, has_epoch = 0;
  uint64_t last_seq = 0, last_payload = 0;
  std::string epoch;
  KVINDEX_RETURN_IF_ERROR(in.Byte(&version, "version"));
  if (version != kSessionStateVersion) {
    return absl::DataLossError("saved session state: unknown version " + std::to_string(version));
  }
  KVINDEX_RETURN_IF_ERROR(in.Byte(&has_seq, "has_seq"));
  KVINDEX_RETURN_IF_ERROR(in.Varint(&last_seq, "last_seq"));
  KVINDEX_RETURN_IF_ERROR(in.Fixed64(&last_payload, "last payload"));
  KVINDEX_RETURN_IF_ERROR(in.Byte(&has_epoch, "has_epoch"));
  KVINDEX_RETURN_IF_ERROR(in.String(&epoch, "epoch"));
  KVINDEX_RETURN_IF_ERROR(processor_.RestoreState(in.Take(in.remaining())));
  has_seq_ = has_seq != 0;
  last_seq_ = last_seq;
  last_payload_ = last_payload;
  resumed_ = has_seq_;
  if (has_epoch != 0) epoch_ = std::move(epoch);
  counters_->last_seq.store(last_seq_, std::memory_order_relaxed);
  counters_->has_seq.store(has_seq_, std::memory_order_relaxed);
  counters_->tracked_blocks.store(processor_.tracked_blocks(), std::memory_order_relaxed);
  return absl::OkStatus();
}

void SourceSession::Apply(uint64_t seq, Frame payload, std::optional<ClearCause> clear_first) {
  events_.clear();
  if (clear_first) {
    processor_.ClearAll(&events_);
    CountClear(*clear_first);
  }
  const Status status = processor_.ProcessPayload(payload, &events_);
  if (!status.ok()) {
    // The processor already cleared the source and appended the kCleared
    // events: its state is no longer known (semantics.md section 3).
    CountClear(ClearCause::kDecodeError);
  }
  has_seq_ = true;
  last_seq_ = seq;
  last_payload_ = StablePayloadDigest(payload);
  counters_->last_seq.store(seq, std::memory_order_relaxed);
  counters_->has_seq.store(true, std::memory_order_relaxed);
  counters_->tracked_blocks.store(processor_.tracked_blocks(), std::memory_order_relaxed);
  if (!events_.empty()) sink_->PublishBatch(&events_);
}

void SourceSession::OnLiveFrames(std::span<const Frame> frames) {
  LiveMessage message;
  const FrameError error = ParseLiveMessage(frames, &message);
  if (error != FrameError::kNone) {
    counters_->frames_invalid[static_cast<int>(error)].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  OnLiveMessage(message);
}

void SourceSession::OnLiveMessage(const LiveMessage& message) {
  counters_->live_batches.fetch_add(1, std::memory_order_relaxed);
  const uint64_t seq = message.seq;
  if (message.topic.epoch) {
    if (epoch_ && *epoch_ != *message.topic.epoch) {
      // A new SGLang epoch: the engine restarted, whatever the seq says.
      epoch_ = std::string(*message.topic.epoch);
      counters_->restarts.fetch_add(1, std::memory_order_relaxed);
      normalize::Add(stats_->restarts);
      overlap_.clear();
      Apply(seq, message.payload, ClearCause::kEpochChange);
      return;
    }
    if (!epoch_) epoch_ = std::string(*message.topic.epoch);
  }
  if (!has_seq_) {
    // The first batch a fresh source sees is never a gap, whatever its seq.
    Apply(seq, message.payload, std::nullopt);
    return;
  }
  if (last_seq_ != kReplayEndSeq && seq == last_seq_ + 1) {
    overlap_.clear();  // the live stream has passed the start-up replay
    Apply(seq, message.payload, std::nullopt);
    return;
  }
  if (seq <= last_seq_) {
    if (IsOverlap(seq, message.payload)) {
      // The live stream repeating what the start-up replay already applied.
      counters_->overlap_skipped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // A live stream never repeats a seq: the engine restarted.
    counters_->restarts.fetch_add(1, std::memory_order_relaxed);
    normalize::Add(stats_->restarts);
    overlap_.clear();
    Apply(seq, message.payload, ClearCause::kRestart);
    return;
  }
  counters_->gaps.fetch_add(1, std::memory_order_relaxed);
  normalize::Add(stats_->gaps);
  overlap_.clear();
  // SourceStats::replays_ok/failed count gaps recovered / gaps that forced a
  // clear; SessionCounters count replay attempts (start-up included).
  if (RecoverGap(seq)) {
    normalize::Add(stats_->replays_ok);
    Apply(seq, message.payload, std::nullopt);
  } else {
    normalize::Add(stats_->replays_failed);
    Apply(seq, message.payload, ClearCause::kGapUnrecovered);
  }
}

bool SourceSession::RecoverGap(uint64_t live_seq) {
  if (replay_ == nullptr) return false;
  if (last_replay_end_ && Now() - *last_replay_end_ < options_.replay_cooldown) {
    counters_->replays_skipped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const uint64_t start = last_seq_ + 1;
  bool first = true;
  bool aborted = false;
  uint64_t received = 0;
  const Status status = replay_->Fetch(start, [&](const ReplayMessage& reply) -> bool {
    if (++received > options_.max_replay_batches) {
      aborted = true;
      return false;
    }
    if (reply.topic.epoch && epoch_ && *reply.topic.epoch != *epoch_) {
      // The buffer belongs to a newer engine incarnation: it cannot fill the
      // gap of the old one.
      aborted = true;
      return false;
    }
    if (first && reply.seq > start) {
      // The engine no longer buffers `start`: the gap cannot be recovered.
      aborted = true;
      return false;
    }
    first = false;
    if (reply.seq >= live_seq) return false;  // the live stream delivers the rest
    if (reply.seq <= last_seq_) {
      counters_->overlap_skipped.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    counters_->replayed_batches.fetch_add(1, std::memory_order_relaxed);
    if (reply.seq == last_seq_ + 1) {
      Apply(reply.seq, reply.payload, std::nullopt);
    } else {
      // A gap inside the replay stream: clear, then apply what follows.
      counters_->gaps.fetch_add(1, std::memory_order_relaxed);
      Apply(reply.seq, reply.payload, ClearCause::kReplayGap);
    }
    return last_seq_ + 1 < live_seq;  // stop as soon as the gap is covered
  });
  last_replay_end_ = Now();
  const bool covered = !aborted && last_seq_ + 1 == live_seq;
  if (covered) {
    counters_->replays_ok.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters_->replays_failed.fetch_add(1, std::memory_order_relaxed);
    uint64_t suppressed = 0;
    if (status.code() != absl::StatusCode::kCancelled && replay_warnings_.Allow(&suppressed)) {
      log::Get("ingest")->warn(
          "source {}: replay of [{}, {}) from {} failed: {} ({} similar suppressed)",
          SourceLabel(spec_), start, live_seq, spec_.replay_endpoint,
          aborted ? "first replayed seq too late or stream unusable" : status.ToString(),
          suppressed);
    }
  }
  return covered;
}

SourceSession::ResumePoint SourceSession::CheckResumePoint() {
  bool answered = false, same = false;
  const Status status = replay_->Fetch(last_seq_, [&](const ReplayMessage& reply) -> bool {
    answered = true;
    same = reply.seq == last_seq_ && StablePayloadDigest(reply.payload) == last_payload_ &&
           (!reply.topic.epoch || !epoch_ || *reply.topic.epoch == *epoch_);
    return false;  // the first reply decides
  });
  if (!status.ok()) return ResumePoint::kUnknown;
  return answered && same ? ResumePoint::kContinue : ResumePoint::kRestarted;
}

bool SourceSession::StartupReplay() {
  if (replay_ == nullptr) return false;
  if (resumed_) {
    resumed_ = false;
    switch (CheckResumePoint()) {
      case ResumePoint::kContinue:
        return ReplayFrom(last_seq_ + 1);
      case ResumePoint::kUnknown:
        log::Get("ingest")->warn(
            "source {}: replay server {} did not answer; continuing from seq {} (the live stream "
            "decides)",
            SourceLabel(spec_), spec_.replay_endpoint, last_seq_);
        return false;
      case ResumePoint::kRestarted: {
        // The engine restarted while we were away: what it holds now is only
        // in its buffer, from seq 0.
        counters_->restarts.fetch_add(1, std::memory_order_relaxed);
        normalize::Add(stats_->restarts);
        events_.clear();
        processor_.ClearAll(&events_);
        CountClear(ClearCause::kRestart);
        has_seq_ = false;
        epoch_.reset();
        counters_->has_seq.store(false, std::memory_order_relaxed);
        counters_->tracked_blocks.store(processor_.tracked_blocks(), std::memory_order_relaxed);
        if (!events_.empty()) sink_->PublishBatch(&events_);
        return ReplayFrom(0);
      }
    }
  }
  return ReplayFrom(has_seq_ ? last_seq_ + 1 : 0);
}

bool SourceSession::ReplayFrom(uint64_t start) {
  uint64_t received = 0;
  bool aborted = false;
  const Status status = replay_->Fetch(start, [&](const ReplayMessage& reply) -> bool {
    if (++received > options_.max_replay_batches) {
      aborted = true;
      return false;
    }
    if (reply.topic.epoch) epoch_ = std::string(*reply.topic.epoch);
    if (has_seq_ && reply.seq <= last_seq_) {
      counters_->overlap_skipped.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    counters_->replayed_batches.fetch_add(1, std::memory_order_relaxed);
    if (!has_seq_ || reply.seq == last_seq_ + 1) {
      // The first replayed batch is the first batch the fresh source sees:
      // not a gap, whatever its seq (the engine buffers only its last N).
      Apply(reply.seq, reply.payload, std::nullopt);
    } else {
      counters_->gaps.fetch_add(1, std::memory_order_relaxed);
      Apply(reply.seq, reply.payload, ClearCause::kReplayGap);
    }
    RememberReplayed(reply.seq, reply.payload);
    return true;
  });
  const bool ok = status.ok() && !aborted;
  if (ok) {
    counters_->replays_ok.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters_->replays_failed.fetch_add(1, std::memory_order_relaxed);
    if (status.code() == absl::StatusCode::kCancelled) return false;  // stopping
    log::Get("ingest")->warn("source {}: start-up replay from {} failed: {}", SourceLabel(spec_),
                             spec_.replay_endpoint,
                             aborted ? "too many replies" : status.ToString());
  }
  return ok;
}

void SourceSession::RememberReplayed(uint64_t seq, Frame payload) {
  if (options_.overlap_window == 0) return;
  overlap_.emplace_back(seq, PayloadDigest(payload));
  while (overlap_.size() > options_.overlap_window) overlap_.pop_front();
}

bool SourceSession::IsOverlap(uint64_t seq, Frame payload) const {
  if (overlap_.empty()) return false;
  auto it = std::lower_bound(overlap_.begin(), overlap_.end(), seq,
                             [](const auto& entry, uint64_t s) { return entry.first < s; });
  return it != overlap_.end() && it->first == seq && it->second == PayloadDigest(payload);
}

}  // namespace kvindex::ingest
