#include "shared/ingest/frames.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shared/ingest/testing/test_util.h"

namespace kvindex::ingest {
namespace {

using testing::AsFrame;
using testing::SeqBytes;

TEST(FramesTest, SeqIsBigEndian) {
  const std::string bytes("\x00\x00\x00\x00\x00\x00\x01\x02", 8);
  EXPECT_EQ(DecodeSeq(AsFrame(bytes)), 0x0102u);
  EXPECT_EQ(SeqBytes(0x0102030405060708ull), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
}

TEST(FramesTest, ParsesGoldenLiveFrames) {
  // docs/wire-format.md section 1: a batch with seq 0 on topic "kv-events".
  const std::string topic = "kv-events", seq(8, '\0'), payload = "\x93";
  const Frame frames[3] = {AsFrame(topic), AsFrame(seq), AsFrame(payload)};
  LiveMessage m;
  ASSERT_EQ(ParseLiveMessage(frames, &m), FrameError::kNone);
  EXPECT_EQ(m.topic.name, "kv-events");
  EXPECT_FALSE(m.topic.epoch.has_value());
  EXPECT_EQ(m.seq, 0u);
  EXPECT_EQ(m.payload.size(), 1u);
}

TEST(FramesTest, EmptyTopicAndEmptyPayloadAreValidFrames) {
  const std::string empty, seq = SeqBytes(7);
  const Frame frames[3] = {AsFrame(empty), AsFrame(seq), AsFrame(empty)};
  LiveMessage m;
  ASSERT_EQ(ParseLiveMessage(frames, &m), FrameError::kNone);
  EXPECT_EQ(m.seq, 7u);
  EXPECT_TRUE(m.payload.empty());  // the decoder decides (decode_error)
}

TEST(FramesTest, RejectsWrongFrameCountAndSeqLength) {
  const std::string a = "a", seq = SeqBytes(1), short_seq(7, '\0'), long_seq(9, '\0');
  LiveMessage m;
  EXPECT_EQ(ParseLiveMessage({}, &m), FrameError::kFrameCount);
  const Frame two[2] = {AsFrame(a), AsFrame(seq)};
  EXPECT_EQ(ParseLiveMessage(two, &m), FrameError::kFrameCount);
  const Frame four[4] = {AsFrame(a), AsFrame(seq), AsFrame(a), AsFrame(a)};
  EXPECT_EQ(ParseLiveMessage(four, &m), FrameError::kFrameCount);
  const Frame bad1[3] = {AsFrame(a), AsFrame(short_seq), AsFrame(a)};
  EXPECT_EQ(ParseLiveMessage(bad1, &m), FrameError::kSeqLength);
  const Frame bad2[3] = {AsFrame(a), AsFrame(long_seq), AsFrame(a)};
  EXPECT_EQ(ParseLiveMessage(bad2, &m), FrameError::kSeqLength);
  EXPECT_EQ(FrameErrorLabel(FrameError::kSeqLength), "seq_length");
}

TEST(FramesTest, SplitsSglangEpochFromTopic) {
  const std::string raw1("kv@10.0.0.1:5557@m\0sgl-kv-epoch=1234", 36);
  const std::string raw2("\0sgl-kv-epoch=9", 15), raw3("abc\0other", 9);
  Topic t = SplitTopic(raw1);
  EXPECT_EQ(t.name, "kv@10.0.0.1:5557@m");
  ASSERT_TRUE(t.epoch.has_value());
  EXPECT_EQ(*t.epoch, "1234");
  t = SplitTopic(raw2);
  EXPECT_EQ(t.name, "");
  EXPECT_EQ(t.epoch.value_or("x"), "9");
  t = SplitTopic(raw3);  // stripped, but no epoch
  EXPECT_EQ(t.name, "abc");
  EXPECT_FALSE(t.epoch.has_value());
  t = SplitTopic("plain");
  EXPECT_EQ(t.name, "plain");
  EXPECT_FALSE(t.epoch.has_value());
}

TEST(FramesTest, ParsesBothReplayLayoutsAndEndMarkers) {
  const std::string empty, topic = "kv", seq = SeqBytes(5), payload = "p";
  const std::string end(8, '\xff');
  ReplayMessage m;
  const Frame with_topic[4] = {AsFrame(empty), AsFrame(topic), AsFrame(seq), AsFrame(payload)};
  ASSERT_EQ(ParseReplayMessage(with_topic, &m), FrameError::kNone);
  EXPECT_TRUE(m.has_topic);
  EXPECT_FALSE(m.end);
  EXPECT_EQ(m.topic.name, "kv");
  EXPECT_EQ(m.seq, 5u);
  EXPECT_EQ(m.payload.size(), 1u);

  const Frame without_topic[3] = {AsFrame(empty), AsFrame(seq), AsFrame(payload)};
  ASSERT_EQ(ParseReplayMessage(without_topic, &m), FrameError::kNone);
  EXPECT_FALSE(m.has_topic);
  EXPECT_FALSE(m.end);
  EXPECT_EQ(m.seq, 5u);

  const Frame end4[4] = {AsFrame(empty), AsFrame(empty), AsFrame(end), AsFrame(empty)};
  ASSERT_EQ(ParseReplayMessage(end4, &m), FrameError::kNone);
  EXPECT_TRUE(m.end);
  const Frame end3[3] = {AsFrame(empty), AsFrame(end), AsFrame(empty)};
  ASSERT_EQ(ParseReplayMessage(end3, &m), FrameError::kNone);
  EXPECT_TRUE(m.end);
}

TEST(FramesTest, RejectsMalformedReplayReplies) {
  const std::string empty, x = "x", seq = SeqBytes(1), short_seq = "123";
  ReplayMessage m;
  const Frame no_delim[3] = {AsFrame(x), AsFrame(seq), AsFrame(x)};
  EXPECT_EQ(ParseReplayMessage(no_delim, &m), FrameError::kReplayDelimiter);
  const Frame two[2] = {AsFrame(empty), AsFrame(seq)};
  EXPECT_EQ(ParseReplayMessage(two, &m), FrameError::kFrameCount);
  const Frame bad_seq[3] = {AsFrame(empty), AsFrame(short_seq), AsFrame(x)};
  EXPECT_EQ(ParseReplayMessage(bad_seq, &m), FrameError::kSeqLength);
}

}  // namespace
}  // namespace kvindex::ingest
