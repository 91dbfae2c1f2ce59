// Frame validation for engine KV-event messages (transport and replay:
// docs/wire-format.md section 1).
//
// Live messages on the PUB/SUB stream are exactly three frames
// `[topic, seq (8 B big-endian), payload]`. Replay replies on the DEALER
// socket come in two layouts, told apart by frame count:
//   vLLM >= 0.26 / TRT-LLM: ["", topic, seq, payload], end ["", "", ff*8, ""]
//   SGLang / older vLLM:    ["", seq, payload],        end ["", ff*8, ""]
// SGLang snapshot mode appends `\x00sgl-kv-epoch=<epoch>` to the topic: the
// topic is cut at the first NUL and the epoch reported separately.
//
// These functions are pure and never allocate: the views point into the
// caller's frames. Anything malformed returns a FrameError (one metric label
// each); nothing here throws or crashes on arbitrary bytes (fuzzed by
// tests/fuzz/frame_fuzz.cc).
//
//   LiveMessage msg;
//   FrameError err = ParseLiveMessage(frames, &msg);
//   if (err != FrameError::kNone) count(FrameErrorLabel(err));
//
// Thread safety: stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvindex::ingest {

using Frame = std::span<const uint8_t>;

// The seq value of a replay end marker.
inline constexpr uint64_t kReplayEndSeq = ~uint64_t{0};
inline constexpr size_t kSeqBytes = 8;
// Topic suffix marker of SGLang snapshot mode.
inline constexpr std::string_view kSglangEpochMarker = "sgl-kv-epoch=";

enum class FrameError : uint8_t {
  kNone = 0,
  kFrameCount,       // not 3 frames (live) / not 3 or 4 frames (replay)
  kSeqLength,        // seq frame is not 8 bytes
  kReplayDelimiter,  // replay reply without the empty delimiter frame
  kCount,
};
inline constexpr int kNumFrameErrors = static_cast<int>(FrameError::kCount);

// "none", "frame_count", "seq_length", "replay_delimiter".
std::string_view FrameErrorLabel(FrameError error);

struct Topic {
  // Bytes before the first NUL (the whole topic when there is none).
  std::string_view name;
  // SGLang epoch, when the suffix after the NUL is `sgl-kv-epoch=<epoch>`.
  std::optional<std::string_view> epoch;
};
Topic SplitTopic(std::string_view raw);

struct LiveMessage {
  Topic topic;
  uint64_t seq = 0;
  Frame payload;
};
FrameError ParseLiveMessage(std::span<const Frame> frames, LiveMessage* out);

struct ReplayMessage {
  bool end = false;        // end marker: no batch
  bool has_topic = false;  // 4-frame layout
  Topic topic;
  uint64_t seq = 0;
  Frame payload;
};
FrameError ParseReplayMessage(std::span<const Frame> frames, ReplayMessage* out);

// Big-endian helpers for the seq frame.
uint64_t DecodeSeq(Frame frame);  // frame.size() == 8
void EncodeSeq(uint64_t seq, uint8_t out[kSeqBytes]);

}  // namespace kvindex::ingest
