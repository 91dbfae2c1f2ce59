// libFuzzer target for the agent's frame handler: ZMQ frame validation
// (live and both replay layouts) and the per-source sequence state machine
// (SourceSession) driving the real SourceProcessor, with a replay server whose
// replies also come from the fuzz input.
//
// Two input shapes:
//  - empty: every golden vector (data/wire-vectors, loaded at start-up)
//    through the payload path;
//  - starting with a msgpack fixarray byte (0x90-0x9f): the whole input is one
//    engine payload (the golden vectors in data/wire-vectors are
//    direct seeds), delivered through every path: start-up replay in both
//    layouts, live, repeated seq (restart), gap + replay, replay gap, epoch
//    change;
//  - anything else: a FuzzedDataProvider script of live messages (raw or
//    structured; payloads built here, golden vectors, or fuzz bytes), replay
//    replies and topic splits.
// Build: cmake -DKVINDEX_FUZZ=ON -DKVINDEX_SANITIZE=ON with clang;
// run: build/fuzz/frame_fuzz data/wire-vectors
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "shared/ingest/frames.h"
#include "shared/ingest/source_session.h"

namespace {

using kvindex::Status;
using kvindex::ingest::Frame;
using kvindex::ingest::ReplayMessage;

Frame AsFrame(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Seq(uint64_t seq) {
  uint8_t bytes[kvindex::ingest::kSeqBytes];
  kvindex::ingest::EncodeSeq(seq, bytes);
  return std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes));
}

// The golden wire vectors: read once at start-up from their one copy,
// $KVINDEX_SOURCE_DIR/data/wire-vectors (the source tree this binary was
// built from when the variable is unset), so every run uses them whatever
// corpus it gets. A missing or empty directory stops the fuzzer: it must not
// quietly run without them.
#ifndef KVINDEX_SOURCE_DIR
#error "KVINDEX_SOURCE_DIR must name the source tree (tests/fuzz/CMakeLists.txt sets it)"
#endif
std::vector<std::string>& Golden() {
  static std::vector<std::string> golden;
  return golden;
}

void LoadGolden() {
  const char* env = std::getenv("KVINDEX_SOURCE_DIR");
  const std::filesystem::path dir =
      std::filesystem::path(env != nullptr ? env : KVINDEX_SOURCE_DIR) / "data" / "wire-vectors";
  std::error_code error;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".msgpack") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // same order, same fuzz script meaning
  for (const std::filesystem::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    Golden().emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (Golden().empty()) {
    std::fprintf(stderr, "frame_fuzz: no golden wire vectors in %s (set KVINDEX_SOURCE_DIR)\n",
                 dir.c_str());
    std::abort();
  }
}

// [1.0, [["BlockStored", [h], nil, tokens(16), 16, nil, "GPU"]], 0], i < 8.
std::string StoredPayload(uint8_t i, uint8_t parent) {
  static constexpr char kHead[] =
      "\x93\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\x91\x97\xab"
      "BlockStored";
  std::string p(kHead, sizeof(kHead) - 1);
  p += '\x91';
  p += static_cast<char>(0x10 + i);  // engine hash (positive fixint)
  if (parent == 0) {
    p += '\xc0';
  } else {
    p += static_cast<char>(0x10 + (parent & 7));
  }
  p += "\xdc";
  p += '\x00';
  p += '\x10';
  for (int t = 0; t < 16; ++t) p += static_cast<char>((i & 7) * 16 + t);
  p += '\x10';
  p += '\xc0';
  p += "\xa3"
       "GPU";
  p += '\x00';
  return p;
}

class Sink final : public kvindex::ingest::BatchSink {
 public:
  void PublishBatch(std::vector<kvindex::PlacementEvent>* events) override {
    if (events->empty()) __builtin_trap();  // the session never publishes empty batches
    count += events->size();
  }
  size_t count = 0;
};

// Replays a fixed script (payload mode).
class ScriptReplay final : public kvindex::ingest::ReplayFetcher {
 public:
  struct Entry {
    uint64_t seq;
    std::string topic;
    bool has_topic;
  };
  Status Fetch(uint64_t start, absl::FunctionRef<bool(const ReplayMessage&)> on) override {
    for (const Entry& e : script) {
      if (e.seq < start) continue;
      const std::string seq = Seq(e.seq), empty;
      std::vector<Frame> frames = {AsFrame(empty)};
      if (e.has_topic) frames.push_back(AsFrame(e.topic));
      frames.push_back(AsFrame(seq));
      frames.push_back(payload);
      ReplayMessage m;
      if (ParseReplayMessage(frames, &m) != kvindex::ingest::FrameError::kNone) __builtin_trap();
      if (!on(m)) return absl::OkStatus();
    }
    return absl::OkStatus();
  }
  std::vector<Entry> script;
  Frame payload;
};

// Replies drawn from the fuzz input (script mode).
class FuzzReplay final : public kvindex::ingest::ReplayFetcher {
 public:
  explicit FuzzReplay(FuzzedDataProvider* fdp) : fdp_(fdp) {}
  Status Fetch(uint64_t start, absl::FunctionRef<bool(const ReplayMessage&)> on) override {
    const int replies = fdp_->ConsumeIntegralInRange<int>(0, 8);
    for (int r = 0; r < replies; ++r) {
      std::vector<std::string> parts;
      if (fdp_->ConsumeBool()) {
        const int n = fdp_->ConsumeIntegralInRange<int>(0, 5);
        for (int k = 0; k < n; ++k) parts.push_back(fdp_->ConsumeRandomLengthString(48));
      } else {
        parts.push_back("");
        if (fdp_->ConsumeBool()) parts.push_back(fdp_->ConsumeRandomLengthString(24));
        parts.push_back(Seq(start + fdp_->ConsumeIntegralInRange<uint64_t>(0, 4) - 1));
        parts.push_back(fdp_->ConsumeBool() ? StoredPayload(fdp_->ConsumeIntegral<uint8_t>() & 7,
                                                            fdp_->ConsumeIntegral<uint8_t>())
                                            : fdp_->ConsumeRandomLengthString(64));
      }
      std::vector<Frame> frames;
      for (const std::string& p : parts) frames.push_back(AsFrame(p));
      ReplayMessage m;
      if (ParseReplayMessage(frames, &m) != kvindex::ingest::FrameError::kNone) {
        return absl::DataLossError("malformed");
      }
      if (m.end) return absl::OkStatus();
      if (!on(m)) return absl::OkStatus();
    }
    return fdp_->ConsumeBool() ? absl::OkStatus() : absl::DeadlineExceededError("quiet");
  }

 private:
  FuzzedDataProvider* fdp_;
};

kvindex::ingest::SourceSpec Spec() {
  kvindex::ingest::SourceSpec spec;
  spec.worker = "w0";
  spec.model = "m";
  spec.block_size = 16;
  spec.pub_endpoint = "inproc://fuzz";
  return spec;
}

kvindex::ingest::SessionOptions Options() {
  kvindex::ingest::SessionOptions options;
  options.replay_cooldown = std::chrono::milliseconds(0);
  options.max_replay_batches = 64;
  options.overlap_window = 16;
  options.now = [] { return std::chrono::steady_clock::time_point{}; };
  return options;
}

void Live(kvindex::ingest::SourceSession& session, const std::string& topic, uint64_t seq,
          Frame payload) {
  const std::string seq_bytes = Seq(seq);
  const Frame frames[3] = {AsFrame(topic), AsFrame(seq_bytes), payload};
  session.OnLiveFrames(frames);
}

void PayloadMode(const uint8_t* data, size_t size) {
  const Frame payload(data, size);
  kvindex::normalize::SourceStats stats;
  kvindex::ingest::SessionCounters counters;
  ScriptReplay replay;
  replay.payload = payload;
  const std::string epoch1("kv\0sgl-kv-epoch=1", 17), epoch2("kv\0sgl-kv-epoch=2", 17);
  replay.script = {{0, "kv", true}, {1, "", false}, {2, epoch1, true}};
  Sink sink;
  kvindex::ingest::SourceSession session(Spec(), Options(), &stats, &counters, &replay, &sink);
  session.PublishStartupClear();
  session.StartupReplay();
  Live(session, "kv", 2, payload);  // overlap with the start-up replay
  Live(session, "kv", 3, payload);  // in order
  Live(session, "kv", 3, payload);  // equal seq: restart
  replay.script = {{4, "kv", true}, {6, "kv", true}, {8, "", false}};
  Live(session, "kv", 9, payload);  // gap -> replay with a gap inside
  replay.script = {{12, "kv", true}};
  Live(session, "kv", 11, payload);  // first replayed seq too late
  Live(session, epoch1, 12, payload);
  Live(session, epoch2, 13, payload);  // new epoch: restart
  Live(session, "kv", 0, payload);     // backwards: restart
}

void ScriptMode(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  kvindex::normalize::SourceStats stats;
  kvindex::ingest::SessionCounters counters;
  FuzzReplay replay(&fdp);
  Sink sink;
  kvindex::ingest::SourceSession session(Spec(), Options(), &stats, &counters,
                                         fdp.ConsumeBool() ? &replay : nullptr, &sink);
  session.PublishStartupClear();
  session.StartupReplay();
  uint64_t seq = fdp.ConsumeIntegral<uint64_t>() >> fdp.ConsumeIntegralInRange<int>(0, 63);
  for (int step = 0; step < 256 && fdp.remaining_bytes() > 0; ++step) {
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: {  // raw frames
        std::vector<std::string> parts(fdp.ConsumeIntegralInRange<int>(0, 5));
        for (std::string& p : parts) p = fdp.ConsumeRandomLengthString(64);
        std::vector<Frame> frames;
        for (const std::string& p : parts) frames.push_back(AsFrame(p));
        session.OnLiveFrames(frames);
        break;
      }
      case 1: {  // structured live message
        std::string topic = "kv";
        const int epoch = fdp.ConsumeIntegralInRange<int>(0, 3);
        if (epoch > 0) topic += std::string("\0sgl-kv-epoch=", 14) + std::to_string(epoch);
        switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
          case 0:
            seq += 1;
            break;
          case 1:
            seq += fdp.ConsumeIntegralInRange<uint64_t>(2, 5);
            break;
          case 2:
            seq -= fdp.ConsumeIntegralInRange<uint64_t>(0, 3);
            break;
          default:
            seq = fdp.ConsumeIntegral<uint64_t>();
            break;
        }
        std::string payload;
        switch (fdp.ConsumeIntegralInRange<int>(0, 2)) {
          case 0:
            payload =
                StoredPayload(fdp.ConsumeIntegral<uint8_t>() & 7, fdp.ConsumeIntegral<uint8_t>());
            break;
          case 1:
            payload = Golden()[fdp.ConsumeIntegralInRange<size_t>(0, Golden().size() - 1)];
            break;
          default:
            payload = fdp.ConsumeRandomLengthString(96);
            break;
        }
        Live(session, topic, seq, AsFrame(payload));
        break;
      }
      case 2: {  // replay reply parsing
        std::vector<std::string> parts(fdp.ConsumeIntegralInRange<int>(0, 5));
        for (std::string& p : parts) p = fdp.ConsumeRandomLengthString(32);
        std::vector<Frame> frames;
        for (const std::string& p : parts) frames.push_back(AsFrame(p));
        ReplayMessage m;
        kvindex::ingest::ParseReplayMessage(frames, &m);
        break;
      }
      default: {
        const std::string raw = fdp.ConsumeRandomLengthString(64);
        const kvindex::ingest::Topic t = kvindex::ingest::SplitTopic(raw);
        if (t.name.size() > raw.size()) __builtin_trap();
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  LoadGolden();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    // libFuzzer always runs the empty input first: push every golden vector
    // through every path once per run.
    for (const std::string& golden : Golden()) {
      PayloadMode(reinterpret_cast<const uint8_t*>(golden.data()), golden.size());
    }
    return 0;
  }
  if ((data[0] & 0xf0) == 0x90) {
    PayloadMode(data, size);
  } else {
    ScriptMode(data, size);
  }
  return 0;
}
