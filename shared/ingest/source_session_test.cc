// Sequence state machine tests (semantics.md section 3) with a scripted
// in-memory replay server: no sockets, fully deterministic.
#include "shared/ingest/source_session.h"

#include <gtest/gtest.h>

#include "shared/ingest/testing/test_util.h"

namespace kvindex::ingest {
namespace {

using testing::GarbagePayload;
using testing::Renderer;
using testing::StoredBatch;

struct Scripted {
  uint64_t seq;
  std::string payload;
  std::optional<std::string> epoch = std::nullopt;  // replay topic epoch (4-frame layout)
};

// Serves the scripted batches with seq >= start (in script order), like an
// engine buffer; `status` is what Fetch returns after the script.
class FakeReplay final : public ReplayFetcher {
 public:
  Status Fetch(uint64_t start_seq,
               absl::FunctionRef<bool(const ReplayMessage&)> on_message) override {
    requests.push_back(start_seq);
    for (const Scripted& s : script) {
      if (s.seq < start_seq && !serve_everything) continue;
      std::string topic;
      if (s.epoch) topic = std::string("kv\0sgl-kv-epoch=", 16) + *s.epoch;
      ReplayMessage m;
      m.seq = s.seq;
      m.payload = testing::AsFrame(s.payload);
      m.has_topic = true;
      m.topic = SplitTopic(topic);
      if (!on_message(m)) return absl::OkStatus();
    }
    return status;
  }
  std::vector<Scripted> script;
  bool serve_everything = false;  // ignore start_seq (overlapping server)
  Status status = absl::OkStatus();
  std::vector<uint64_t> requests;
};

class RecordingSink final : public BatchSink {
 public:
  void PublishBatch(std::vector<PlacementEvent>* events) override { batches.push_back(*events); }
  std::vector<std::vector<PlacementEvent>> batches;
};

class SourceSessionTest : public ::testing::Test {
 protected:
  SourceSessionTest() {
    spec_.worker = "w0";
    spec_.model = "m";
    spec_.block_size = testing::kBlockSize;
    spec_.pub_endpoint = "inproc://unused";
    options_.replay_cooldown = std::chrono::milliseconds(0);
    options_.now = [this] { return now_; };
  }

  // Creates the session and runs the start-up sequence.
  void Begin(bool with_replay = true) {
    session_ = std::make_unique<SourceSession>(spec_, options_, &stats_, &counters_,
                                               with_replay ? &replay_ : nullptr, &sink_);
    session_->PublishStartupClear();
    session_->StartupReplay();
  }

  // Live message with seq `seq` carrying stored batch `index` (= seq by default).
  void Live(uint64_t seq, std::optional<uint64_t> index = std::nullopt,
            std::optional<std::string> epoch = std::nullopt) {
    LivePayload(seq, StoredBatch(index.value_or(seq)), epoch);
  }
  void LivePayload(uint64_t seq, const std::string& payload,
                   std::optional<std::string> epoch = std::nullopt) {
    std::string topic = "kv-events";
    if (epoch) topic += std::string("\0sgl-kv-epoch=", 14) + *epoch;
    const std::string seq_bytes = testing::SeqBytes(seq);
    const Frame frames[3] = {testing::AsFrame(topic), testing::AsFrame(seq_bytes),
                             testing::AsFrame(payload)};
    session_->OnLiveFrames(frames);
  }

  std::string Render() const { return renderer_.Batches(sink_.batches); }
  uint64_t Clears(ClearCause cause) const {
    return counters_.clears[static_cast<int>(cause)].load();
  }

  SourceSpec spec_;
  SessionOptions options_;
  std::chrono::steady_clock::time_point now_{};
  normalize::SourceStats stats_;
  SessionCounters counters_;
  FakeReplay replay_;
  RecordingSink sink_;
  std::unique_ptr<SourceSession> session_;
  Renderer renderer_;
};

TEST_F(SourceSessionTest, StartupPublishesClearThenReplaysFromZero) {
  replay_.script = {{0, StoredBatch(0)}, {1, StoredBatch(1)}, {2, StoredBatch(2)}};
  Begin();
  EXPECT_EQ(replay_.requests, std::vector<uint64_t>{0});
  EXPECT_EQ(Render(), "C|S0|S1|S2");
  EXPECT_EQ(counters_.replays_ok.load(), 1u);
  EXPECT_EQ(session_->last_seq(), 2u);
  EXPECT_EQ(Clears(ClearCause::kStartup), 1u);
}

// The documented DP-rank form (interfaces.md): several --source entries name
// one worker, one per rank endpoint, none with dp_rank=; the rank comes from
// the envelope. Each socket serves the one rank its first envelope names and
// refuses others (counted), and its clears never name the other socket's rank.
TEST_F(SourceSessionTest, UndeclaredSocketServesTheRankOfItsFirstEnvelope) {
  StatusOr<std::vector<SourceSpec>> parsed =
      ParseSourceSpec("worker=w0,engine=vllm,model=m,block_size=4,pub=tcp://127.0.0.1:5558");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  spec_ = parsed->at(0);
  spec_.block_size = testing::kBlockSize;
  Begin(/*with_replay=*/false);
  LivePayload(0, StoredBatch(0, /*dp_rank=*/1));
  LivePayload(1, StoredBatch(1, /*dp_rank=*/0));  // a second publisher on the socket
  LivePayload(2, StoredBatch(2, /*dp_rank=*/1));
  EXPECT_EQ(Render(), "C|C S0|S2");
  std::vector<std::pair<int, uint32_t>> kinds;  // (kind, rank) after the start-up clear
  for (size_t b = 1; b < sink_.batches.size(); ++b) {
    for (const PlacementEvent& e : sink_.batches[b]) {
      if (e.kind != PlacementKind::kHeartbeat) kinds.emplace_back(int(e.kind), e.source.dp_rank);
    }
  }
  const std::vector<std::pair<int, uint32_t>> want = {{int(PlacementKind::kCleared), 1},
                                                      {int(PlacementKind::kStored), 1},
                                                      {int(PlacementKind::kStored), 1}};
  EXPECT_EQ(kinds, want);
  EXPECT_EQ(stats_.dropped[static_cast<int>(DropReason::kRankOutOfRange)].load(), 1u);
  // A later clear (here a decode error) names rank 1 only, never w0/0.
  sink_.batches.clear();
  LivePayload(3, GarbagePayload());
  ASSERT_EQ(sink_.batches.size(), 1u);
  ASSERT_EQ(sink_.batches[0].size(), 1u);
  EXPECT_EQ(sink_.batches[0][0].kind, PlacementKind::kCleared);
  EXPECT_EQ(sink_.batches[0][0].source.dp_rank, 1u);
}

// The bound stays: an undeclared socket's first envelope may not name a rank
// past kMaxDpRanks, and a declared rank keeps its declared range.
TEST_F(SourceSessionTest, RankBoundsStay) {
  Begin(/*with_replay=*/false);
  LivePayload(0, StoredBatch(0, /*dp_rank=*/kMaxDpRanks));
  LivePayload(1, StoredBatch(1, /*dp_rank=*/0));
  EXPECT_EQ(Render(), "C|S1");
  StatusOr<std::vector<SourceSpec>> declared = ParseSourceSpec(
      "worker=w1,engine=vllm,model=m,block_size=4,pub=tcp://127.0.0.1:5558,dp_rank=0");
  ASSERT_TRUE(declared.ok()) << declared.status();
  EXPECT_TRUE(declared->at(0).rank_declared);
  spec_ = declared->at(0);
  spec_.block_size = testing::kBlockSize;
  sink_.batches.clear();
  Begin(/*with_replay=*/false);
  LivePayload(0, StoredBatch(0, /*dp_rank=*/1));
  EXPECT_EQ(Render(), "C");
  EXPECT_EQ(stats_.dropped[static_cast<int>(DropReason::kRankOutOfRange)].load(), 2u);
}

TEST_F(SourceSessionTest, StartupReplayOverlapWithLiveIsNotARestart) {
  replay_.script = {{0, StoredBatch(0)}, {1, StoredBatch(1)}, {2, StoredBatch(2)}};
  Begin();
  Live(1);  // queued in the SUB socket while the replay ran
  Live(2);
  Live(3);
  EXPECT_EQ(Render(), "C|S0|S1|S2|S3");
  EXPECT_EQ(counters_.restarts.load(), 0u);
  EXPECT_EQ(counters_.overlap_skipped.load(), 2u);
}

TEST_F(SourceSessionTest, StartupReplayThenDifferentPayloadAtOldSeqIsARestart) {
  replay_.script = {{0, StoredBatch(0)}, {1, StoredBatch(1)}, {2, StoredBatch(2)}};
  Begin();
  Live(1, 40);  // same seq, other content: a restarted engine
  EXPECT_EQ(Render(), "C|S0|S1|S2|C S40");
  EXPECT_EQ(counters_.restarts.load(), 1u);
}

TEST_F(SourceSessionTest, StartupReplayStartingLateIsNotAGap) {
  replay_.script = {{500, StoredBatch(5)}, {501, StoredBatch(6)}};
  Begin();
  EXPECT_EQ(Render(), "C|S5|S6");
  EXPECT_EQ(counters_.gaps.load(), 0u);
}

TEST_F(SourceSessionTest, StartupReplayFailureLeavesSourceFresh) {
  replay_.status = absl::DeadlineExceededError("quiet");
  Begin();
  EXPECT_EQ(counters_.replays_failed.load(), 1u);
  EXPECT_FALSE(session_->has_seq());
  Live(77, 7);  // first batch ever: never a gap
  EXPECT_EQ(Render(), "C|S7");
  EXPECT_EQ(counters_.gaps.load(), 0u);
}

TEST_F(SourceSessionTest, FirstLiveBatchIsNeverAGapWithoutReplay) {
  Begin(/*with_replay=*/false);
  Live(100, 1);
  Live(101, 2);
  EXPECT_EQ(Render(), "C|S1|S2");
  EXPECT_EQ(counters_.gaps.load(), 0u);
}

TEST_F(SourceSessionTest, GapReplayCoversAndLiveBatchIsApplied) {
  Begin();
  Live(0);
  Live(1);
  replay_.script = {
      {2, StoredBatch(2)}, {3, StoredBatch(3)}, {4, StoredBatch(4)}, {5, StoredBatch(5)}};
  Live(4);
  EXPECT_EQ(replay_.requests, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(Render(), "C|S0|S1|S2|S3|S4");
  EXPECT_EQ(counters_.gaps.load(), 1u);
  EXPECT_EQ(counters_.replays_ok.load(), 2u);  // start-up + gap
  Live(5);                                     // the live stream delivers what the replay left out
  EXPECT_EQ(Render(), "C|S0|S1|S2|S3|S4|S5");
  EXPECT_EQ(counters_.restarts.load(), 0u);
}

TEST_F(SourceSessionTest, ReplayOverlapIsSkippedNotRestart) {
  Begin();
  Live(0);
  Live(1);
  // A server that replays from further back than asked.
  replay_.serve_everything = true;
  replay_.script = {{0, StoredBatch(0)}, {1, StoredBatch(1)}, {2, StoredBatch(2)}};
  Live(3);
  EXPECT_EQ(Render(), "C|S0|S1|S2|S3");
  EXPECT_EQ(counters_.restarts.load(), 0u);
  EXPECT_EQ(counters_.overlap_skipped.load(), 2u);  // seqs 0 and 1 were already applied
}

TEST_F(SourceSessionTest, GapWithoutReplaySocketClears) {
  Begin(/*with_replay=*/false);
  Live(0);
  Live(1);
  Live(5);
  EXPECT_EQ(Render(), "C|S0|S1|C S5");
  EXPECT_EQ(Clears(ClearCause::kGapUnrecovered), 1u);
  EXPECT_EQ(session_->last_seq(), 5u);
  Live(6);
  EXPECT_EQ(Render(), "C|S0|S1|C S5|S6");
}

TEST_F(SourceSessionTest, GapReplayTimeoutClears) {
  Begin();
  Live(0);
  replay_.status = absl::DeadlineExceededError("quiet");
  Live(3);
  EXPECT_EQ(Render(), "C|S0|C S3");
  EXPECT_EQ(counters_.replays_failed.load(), 1u);
}

TEST_F(SourceSessionTest, GapReplayFirstSeqTooLateClears) {
  Begin();
  Live(0);
  replay_.script = {{2, StoredBatch(2)}, {3, StoredBatch(3)}};  // seq 1 no longer buffered
  Live(4);
  EXPECT_EQ(Render(), "C|S0|C S4");
  EXPECT_EQ(counters_.replays_failed.load(), 1u);
  EXPECT_EQ(Clears(ClearCause::kGapUnrecovered), 1u);
}

TEST_F(SourceSessionTest, GapInsideReplayStreamClearsAndAppliesWhatFollows) {
  Begin();
  Live(0);
  Live(1);
  replay_.script = {{2, StoredBatch(2)}, {4, StoredBatch(4)}};  // 3 lost (encode failure)
  Live(5);
  EXPECT_EQ(Render(), "C|S0|S1|S2|C S4|S5");
  EXPECT_EQ(Clears(ClearCause::kReplayGap), 1u);
  EXPECT_EQ(counters_.gaps.load(), 2u);
}

TEST_F(SourceSessionTest, ReplayEndingBeforeTheGapIsCoveredClears) {
  Begin();
  Live(0);
  replay_.script = {{1, StoredBatch(1)}};
  Live(3);
  EXPECT_EQ(Render(), "C|S0|S1|C S3");
  EXPECT_EQ(counters_.replays_failed.load(), 1u);
}

TEST_F(SourceSessionTest, CooldownSkipsReplayAndClears) {
  options_.replay_cooldown = std::chrono::milliseconds(1000);
  Begin();
  Live(0);
  replay_.script = {{1, StoredBatch(1)}, {2, StoredBatch(2)}, {4, StoredBatch(4)},
                    {5, StoredBatch(5)}, {7, StoredBatch(7)}, {8, StoredBatch(8)}};
  Live(2);  // replay [1, 2)
  Live(5);  // gap within the cooldown: clear
  EXPECT_EQ(counters_.replays_skipped.load(), 1u);
  now_ += std::chrono::milliseconds(1500);
  Live(8);  // cooldown over: replay [6, 8) -> first replayed seq 7 > 6: too late
  EXPECT_EQ(Render(), "C|S0|S1|S2|C S5|C S8");
  EXPECT_EQ(replay_.requests, (std::vector<uint64_t>{0, 1, 6}));
}

TEST_F(SourceSessionTest, SeqBackwardsIsARestart) {
  Begin(false);
  Live(0);
  Live(1);
  Live(2);
  Live(0, 50);
  EXPECT_EQ(Render(), "C|S0|S1|S2|C S50");
  EXPECT_EQ(counters_.restarts.load(), 1u);
  EXPECT_EQ(Clears(ClearCause::kRestart), 1u);
  EXPECT_EQ(session_->last_seq(), 0u);
  Live(1, 51);
  EXPECT_EQ(Render(), "C|S0|S1|S2|C S50|S51");
}

TEST_F(SourceSessionTest, EqualSeqIsARestart) {
  Begin(false);
  Live(0);
  Live(1);
  Live(1, 51);
  EXPECT_EQ(Render(), "C|S0|S1|C S51");
  EXPECT_EQ(counters_.restarts.load(), 1u);
}

TEST_F(SourceSessionTest, SglangEpochChangeIsARestart) {
  spec_.engine = wire::EngineKind::kSglang;
  Begin(false);
  Live(0, 0, "100");
  Live(1, 1, "100");
  Live(2, 2, "200");  // seq continues, epoch changed
  EXPECT_EQ(Render(), "C|S0|S1|C S2");
  EXPECT_EQ(Clears(ClearCause::kEpochChange), 1u);
  Live(3, 3, "200");
  EXPECT_EQ(Render(), "C|S0|S1|C S2|S3");
  EXPECT_EQ(counters_.restarts.load(), 1u);
}

TEST_F(SourceSessionTest, DecodeErrorClearsAndSeqContinues) {
  Begin(false);
  Live(0);
  LivePayload(1, GarbagePayload());
  Live(2);
  EXPECT_EQ(Render(), "C|S0|C|S2");
  EXPECT_EQ(Clears(ClearCause::kDecodeError), 1u);
  EXPECT_EQ(stats_.decode_errors.load(), 1u);
  EXPECT_EQ(counters_.gaps.load(), 0u);
}

TEST_F(SourceSessionTest, DecodeErrorInsideReplayClears) {
  Begin();
  Live(0);
  replay_.script = {{1, GarbagePayload()}, {2, StoredBatch(2)}};
  Live(3);
  EXPECT_EQ(Render(), "C|S0|C|S2|S3");
  EXPECT_EQ(counters_.replays_ok.load(), 2u);
}

TEST_F(SourceSessionTest, TrtllmSeqStartingAtTimeNsFollowsTheSameRules) {
  spec_.engine = wire::EngineKind::kTrtllm;
  Begin(false);
  const uint64_t t0 = 1757500000123456789ull;
  Live(t0, 0);
  Live(t0 + 1, 1);
  Live(t0 + 3, 3);  // gap, no replay socket
  Live(t0 - 5, 9);  // backwards: restart
  EXPECT_EQ(Render(), "C|S0|S1|C S3|C S9");
  EXPECT_EQ(counters_.restarts.load(), 1u);
  EXPECT_EQ(counters_.gaps.load(), 1u);
}

TEST_F(SourceSessionTest, EmptyBatchAdvancesSeqWithoutPublishing) {
  Begin(false);
  Live(0);
  LivePayload(1, testing::EmptyBatch());
  Live(2);
  EXPECT_EQ(Render(), "C|S0|S2");
  EXPECT_EQ(counters_.gaps.load(), 0u);
}

TEST_F(SourceSessionTest, MalformedFramesAreCountedAndIgnored) {
  Begin(false);
  const std::string topic = "t", seq = testing::SeqBytes(0), short_seq = "1234567";
  const std::string payload = StoredBatch(0);
  const Frame two[2] = {testing::AsFrame(topic), testing::AsFrame(seq)};
  session_->OnLiveFrames(two);
  const Frame bad_seq[3] = {testing::AsFrame(topic), testing::AsFrame(short_seq),
                            testing::AsFrame(payload)};
  session_->OnLiveFrames(bad_seq);
  session_->OnLiveFrames({});
  EXPECT_EQ(Render(), "C");
  EXPECT_EQ(counters_.frames_invalid[static_cast<int>(FrameError::kFrameCount)].load(), 2u);
  EXPECT_EQ(counters_.frames_invalid[static_cast<int>(FrameError::kSeqLength)].load(), 1u);
  EXPECT_FALSE(session_->has_seq());
}

TEST_F(SourceSessionTest, ReplayFromNewerEpochCannotCoverGap) {
  spec_.engine = wire::EngineKind::kSglang;
  Begin();
  Live(0, 0, "1");
  replay_.script = {{1, StoredBatch(1), std::string("2")}, {2, StoredBatch(2), std::string("2")}};
  Live(3, 3, "1");
  EXPECT_EQ(Render(), "C|S0|C S3");
  EXPECT_EQ(counters_.replays_failed.load(), 1u);
}

// ---- resuming from a saved state (embedded router checkpoints) ------------

class SourceSessionResumeTest : public SourceSessionTest {
 protected:
  // Runs a first session over `script`, then saves its state and starts a
  // second one (fresh sink, counters) resumed from it.
  std::string RunAndSave(const std::vector<Scripted>& script) {
    replay_.script = script;
    Begin();
    std::string state;
    session_->SaveState(&state);
    return state;
  }
  Status Resume(const std::string& state) {
    sink_.batches.clear();
    replay_.requests.clear();
    counters_.clears[static_cast<int>(ClearCause::kStartup)].store(0);
    session_ =
        std::make_unique<SourceSession>(spec_, options_, &stats_, &counters_, &replay_, &sink_);
    return session_->Resume(state);
  }
};

TEST_F(SourceSessionResumeTest, ContinuesFromLastSeqWithoutAClear) {
  const std::string state = RunAndSave({{0, StoredBatch(0)}, {1, StoredBatch(1)}});
  // The engine published 2 and 3 while the router was down.
  replay_.script = {
      {0, StoredBatch(0)}, {1, StoredBatch(1)}, {2, StoredBatch(2)}, {3, StoredBatch(3)}};
  ASSERT_TRUE(Resume(state).ok());
  EXPECT_TRUE(session_->has_seq());
  EXPECT_EQ(session_->last_seq(), 1u);
  EXPECT_TRUE(session_->StartupReplay());
  // It still holds batch 1 as applied: continue after it.
  EXPECT_EQ(replay_.requests, (std::vector<uint64_t>{1, 2}));
  Live(3);  // repeats the replayed 3: not a restart
  Live(4);
  EXPECT_EQ(Render(), "S2|S3|S4");
  EXPECT_EQ(counters_.restarts.load(), 0u);
  EXPECT_EQ(counters_.gaps.load(), 0u);
  // The saved normalization state carries on: a re-announced block is not
  // stored again.
  Live(5, 0);
  EXPECT_EQ(Render(), "S2|S3|S4");
  EXPECT_EQ(session_->tracked_blocks(), 5u);
}

TEST_F(SourceSessionResumeTest, EngineNoLongerHoldingTheLastBatchStartsAfresh) {
  const std::string state = RunAndSave({{0, StoredBatch(0)}, {1, StoredBatch(1)}});
  // Its buffer starts past batch 1: what happened meanwhile is unknown.
  replay_.script = {{5, StoredBatch(5)}, {6, StoredBatch(6)}};
  ASSERT_TRUE(Resume(state).ok());
  session_->StartupReplay();
  EXPECT_EQ(Render(), "C|S5|S6");
  EXPECT_EQ(Clears(ClearCause::kRestart), 1u);
  EXPECT_EQ(session_->tracked_blocks(), 2u);
}

TEST_F(SourceSessionResumeTest, EngineRestartedBehindTheSavedSeqStartsAfresh) {
  const std::string state =
      RunAndSave({{0, StoredBatch(0)}, {1, StoredBatch(1)}, {2, StoredBatch(2)}});
  replay_.script = {{0, StoredBatch(7)}};  // the new engine published one batch
  ASSERT_TRUE(Resume(state).ok());
  session_->StartupReplay();
  EXPECT_EQ(replay_.requests, (std::vector<uint64_t>{2, 0}));
  Live(1, 8);
  EXPECT_EQ(Render(), "C|S7|S8");
  EXPECT_EQ(counters_.restarts.load(), 1u);
}

TEST_F(SourceSessionResumeTest, EngineRestartedPastTheSavedSeqStartsAfresh) {
  const std::string state = RunAndSave({{0, StoredBatch(0)}, {1, StoredBatch(1)}});
  // Same seqs, other bytes: a new engine that already published more.
  replay_.script = {{0, StoredBatch(7)}, {1, StoredBatch(8)}, {2, StoredBatch(9)}};
  ASSERT_TRUE(Resume(state).ok());
  session_->StartupReplay();
  EXPECT_EQ(Render(), "C|S7|S8|S9");
  EXPECT_EQ(session_->tracked_blocks(), 3u);
}

TEST_F(SourceSessionResumeTest, NewSglangEpochStartsAfresh) {
  spec_.engine = wire::EngineKind::kSglang;
  const std::string state =
      RunAndSave({{0, StoredBatch(0), std::string("1")}, {1, StoredBatch(1), std::string("1")}});
  replay_.script = {{1, StoredBatch(1), std::string("2")}, {2, StoredBatch(9), std::string("2")}};
  ASSERT_TRUE(Resume(state).ok());
  session_->StartupReplay();
  EXPECT_EQ(Render(), "C|S1|S9");
  EXPECT_EQ(counters_.restarts.load(), 1u);
}

TEST_F(SourceSessionResumeTest, SilentReplayServerKeepsTheStateForTheLiveStream) {
  const std::string state = RunAndSave({{0, StoredBatch(0)}, {1, StoredBatch(1)}});
  replay_.script = {};
  replay_.status = absl::DeadlineExceededError("quiet");
  ASSERT_TRUE(Resume(state).ok());
  session_->StartupReplay();
  Live(2);
  EXPECT_EQ(Render(), "S2");
  EXPECT_EQ(session_->tracked_blocks(), 3u);
}

TEST_F(SourceSessionResumeTest, DamagedStateIsRefused) {
  const std::string state = RunAndSave({{0, StoredBatch(0)}});
  EXPECT_EQ(Resume(state.substr(0, state.size() / 2)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(session_->tracked_blocks(), 0u);
  EXPECT_EQ(Resume("").code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvindex::ingest
