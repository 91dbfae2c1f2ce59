// EngineEndpoint's replay socket answers a request with every buffered batch:
// a long replay (an agent restarted late in a run asks from seq 0, up to
// replay_buffer batches) must arrive whole, however slowly the agent reads.
// A ROUTER socket silently drops what exceeds its send high-water mark (libzmq
// default 1,000 messages): the agent then saw a gap inside the replay stream
// and cleared a source the ground truth said it still held (issue #26).
#include "services/mockengine/engine_endpoint.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <string>
#include <utility>
#include <vector>
#include <zmq_addon.hpp>

namespace kvindex::mockengine {
namespace {

uint64_t FromBigEndian(const zmq::message_t& message) {
  uint64_t value = 0;
  const auto* data = static_cast<const uint8_t*>(message.data());
  for (size_t i = 0; i < message.size(); ++i) value = (value << 8) | data[i];
  return value;
}

// Publishes kBatches batches, asks for all from seq 0, reads only once the
// engine has queued its answer: every seq must arrive, in order, then the end.
void LongReplay(const char* pub, const char* replay, int rcvhwm, size_t payload_bytes) {
  constexpr uint64_t kBatches = 3000;  // past libzmq's default HWM (1,000), below the buffer
  zmq::context_t context(1);
  EngineEndpoint endpoint(context, {.pub_endpoint = pub,
                                    .replay_endpoint = replay,
                                    .topic = "kv",
                                    .layout = ReplayLayout::kWithTopic,
                                    .replay_buffer = 10000});
  ASSERT_TRUE(endpoint.Bind().ok());
  const std::vector<uint8_t> payload(payload_bytes, 0x90);  // an empty msgpack array, padded
  for (uint64_t i = 0; i < kBatches; ++i) ASSERT_TRUE(endpoint.Publish(payload).ok());

  // The agent's replay client: a DEALER asking ["", start=0]. It reads only
  // once the engine has answered (a reader busy elsewhere, as on a loaded
  // machine); its receive HWM is libzmq's default here.
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  if (rcvhwm >= 0) dealer.set(zmq::sockopt::rcvhwm, rcvhwm);
  dealer.connect(endpoint.replay_socket()->get(zmq::sockopt::last_endpoint));
  const std::array<uint8_t, 8> start{};
  dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start), zmq::send_flags::none);
  std::vector<zmq::pollitem_t> items{{endpoint.replay_socket()->handle(), 0, ZMQ_POLLIN, 0}};
  ASSERT_EQ(zmq::poll(items, std::chrono::milliseconds(5000)), 1);
  do {
    endpoint.ServeReplay();
  } while (endpoint.replay_pending());

  uint64_t expected = 0;
  bool ended = false;
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  while (!ended) {
    std::vector<zmq::message_t> frames;
    const auto received = zmq::recv_multipart(dealer, std::back_inserter(frames));
    ASSERT_TRUE(received.has_value()) << "replay stalled after seq " << expected;
    ASSERT_EQ(frames.size(), 4u);  // "", topic, seq, payload
    const uint64_t seq = FromBigEndian(frames[2]);
    if (seq == ~uint64_t{0}) {
      ended = true;
      break;
    }
    ASSERT_EQ(seq, expected) << "batches " << expected << ".." << seq - 1
                             << " missing from the replay";
    ++expected;
  }
  EXPECT_EQ(expected, kBatches);
}

TEST(EngineEndpointTest, LongReplayArrivesWholeToASlowReader) {
  // libzmq's default receive HWM: only the engine side can hold the rest.
  LongReplay("inproc://endpoint-test-pub", "inproc://endpoint-test-replay", -1, 64);
}

TEST(EngineEndpointTest, LongReplayOverTcpLikeTheAgent) {
  // The agent's replay DEALER: receive HWM 100,000; soak-sized payloads.
  LongReplay("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", 100000, 30000);
}

// Two agents' requests: a long answer (a restarted agent asking from seq 0)
// and a short one. Each ServeReplay sends every pending answer one chunk, so
// the short one is answered whole at once and the long one is not sent in
// one go. (Answered one after the other, the second requester waited for
// the whole first answer: with five sources of ~1,000 batches each the last
// ones heard nothing for longer than the agent's replay timeout, and the
// agent started them empty; the truth said they held everything.)
TEST(EngineEndpointTest, ALongAnswerDoesNotHoldBackAnotherRequester) {
  zmq::context_t context(1);
  EngineEndpoint endpoint(context, {.pub_endpoint = "inproc://endpoint-test-pub2",
                                    .replay_endpoint = "inproc://endpoint-test-replay2",
                                    .topic = "kv",
                                    .layout = ReplayLayout::kWithoutTopic,
                                    .replay_buffer = 10000});
  ASSERT_TRUE(endpoint.Bind().ok());
  const std::vector<uint8_t> payload(64, 0x90);
  constexpr uint64_t kBatches = 2000;
  for (uint64_t i = 0; i < kBatches; ++i) ASSERT_TRUE(endpoint.Publish(payload).ok());
  auto ask = [&](zmq::socket_t& dealer, uint64_t from) {
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::rcvhwm, 100000);
    dealer.set(zmq::sockopt::rcvtimeo, 200);
    dealer.connect("inproc://endpoint-test-replay2");
    std::array<uint8_t, 8> start{};
    for (int i = 7; i >= 0; --i, from >>= 8) start[i] = static_cast<uint8_t>(from & 0xff);
    dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(start), zmq::send_flags::none);
  };
  // Reads what has arrived: (batches, end marker seen).
  auto drain = [](zmq::socket_t& dealer) {
    std::pair<uint64_t, bool> got{0, false};
    while (true) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(dealer, std::back_inserter(frames))) return got;
      if (frames.size() != 3) continue;  // "", seq, payload
      if (FromBigEndian(frames[1]) == ~uint64_t{0}) {
        got.second = true;
        return got;
      }
      ++got.first;
    }
  };
  zmq::socket_t restarted(context, zmq::socket_type::dealer),
      other(context, zmq::socket_type::dealer);
  ask(restarted, 0);
  ask(other, kBatches - 10);
  std::vector<zmq::pollitem_t> items{{endpoint.replay_socket()->handle(), 0, ZMQ_POLLIN, 0}};
  for (int i = 0; i < 50 && zmq::poll(items, std::chrono::milliseconds(10)) == 1; ++i) {
  }
  endpoint.ServeReplay();  // both requests are queued: one round
  const auto first = drain(restarted);
  const auto second = drain(other);
  EXPECT_EQ(second, std::make_pair(uint64_t{10}, true));
  EXPECT_EQ(first, std::make_pair(uint64_t{EngineEndpoint::kReplayChunk}, false));
  EXPECT_TRUE(endpoint.replay_pending());
  while (endpoint.replay_pending()) endpoint.ServeReplay();
  const auto rest = drain(restarted);
  EXPECT_EQ(first.first + rest.first, kBatches);
  EXPECT_TRUE(rest.second);
}

}  // namespace
}  // namespace kvindex::mockengine
