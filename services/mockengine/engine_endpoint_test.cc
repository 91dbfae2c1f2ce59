// EngineEndpoint's replay socket answers a request with every buffered batch:
// a long replay (an agent restarted late in a run asks from seq 0, up to
// replay_buffer batches) must arrive whole, however slowly the agent reads.
// A ROUTER socket silently drops what exceeds its send high-water mark (libzmq
// default 1,000 messages): the agent then saw a gap inside the replay stream
// and cleared a source the ground truth said it still held (issue #26).
#include "services/mockengine/engine_endpoint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
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
  endpoint.ServeReplay();

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

}  // namespace
}  // namespace kvindex::mockengine
