#include "shared/ingest/frames.h"

namespace kvindex::ingest {

std::string_view FrameErrorLabel(FrameError error) {
  switch (error) {
    case FrameError::kNone:
      return "none";
    case FrameError::kFrameCount:
      return "frame_count";
    case FrameError::kSeqLength:
      return "seq_length";
    case FrameError::kReplayDelimiter:
      return "replay_delimiter";
    case FrameError::kCount:
      break;
  }
  return "invalid";
}

namespace {
std::string_view AsView(Frame frame) {
  return {reinterpret_cast<const char*>(frame.data()), frame.size()};
}
}  // namespace

Topic SplitTopic(std::string_view raw) {
  Topic topic;
  const size_t nul = raw.find('\0');
  if (nul == std::string_view::npos) {
    topic.name = raw;
    return topic;
  }
  topic.name = raw.substr(0, nul);
  std::string_view suffix = raw.substr(nul + 1);
  if (suffix.substr(0, kSglangEpochMarker.size()) == kSglangEpochMarker) {
    topic.epoch = suffix.substr(kSglangEpochMarker.size());
  }
  return topic;
}

uint64_t DecodeSeq(Frame frame) {
  uint64_t seq = 0;
  for (size_t i = 0; i < kSeqBytes; ++i) seq = (seq << 8) | frame[i];
  return seq;
}

void EncodeSeq(uint64_t seq, uint8_t out[kSeqBytes]) {
  for (size_t i = 0; i < kSeqBytes; ++i) out[i] = static_cast<uint8_t>(seq >> (8 * (7 - i)));
}

FrameError ParseLiveMessage(std::span<const Frame> frames, LiveMessage* out) {
  if (frames.size() != 3) return FrameError::kFrameCount;
  if (frames[1].size() != kSeqBytes) return FrameError::kSeqLength;
  out->topic = SplitTopic(AsView(frames[0]));
  out->seq = DecodeSeq(frames[1]);
  out->payload = frames[2];
  return FrameError::kNone;
}

FrameError ParseReplayMessage(std::span<const Frame> frames, ReplayMessage* out) {
  if (frames.size() != 3 && frames.size() != 4) return FrameError::kFrameCount;
  if (!frames[0].empty()) return FrameError::kReplayDelimiter;
  const bool has_topic = frames.size() == 4;
  const Frame seq = frames[has_topic ? 2 : 1];
  if (seq.size() != kSeqBytes) return FrameError::kSeqLength;
  *out = ReplayMessage{};
  out->has_topic = has_topic;
  if (has_topic) out->topic = SplitTopic(AsView(frames[1]));
  out->seq = DecodeSeq(seq);
  out->payload = frames.back();
  // The end marker is the all-ones seq with an empty payload. A batch with
  // that seq and a payload cannot exist (seq space never reaches it), so the
  // seq alone decides; the payload is not inspected.
  out->end = out->seq == kReplayEndSeq;
  return FrameError::kNone;
}

}  // namespace kvindex::ingest
