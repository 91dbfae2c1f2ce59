// EngineEndpoint: the sockets of one simulated engine publisher, exactly as
// docs/wire-format.md section 1 describes them: a PUB socket sending [topic, seq (8 B BE),
// payload] and an optional ROUTER replay socket that answers
// ["", start_seq] with the buffered batches and an end marker.
//
// Thread safety: none; one thread owns an endpoint.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <zmq.hpp>

#include "shared/base/status.h"

namespace kvindex::mockengine {

enum class ReplayLayout {
  kWithTopic,     // vLLM >= 0.26, TRT-LLM: ["", topic, seq, payload]
  kWithoutTopic,  // SGLang, older vLLM: ["", seq, payload]
};

struct EndpointOptions {
  std::string pub_endpoint;     // bound, e.g. tcp://127.0.0.1:5557
  std::string replay_endpoint;  // bound; empty = no replay socket
  std::string topic;
  ReplayLayout layout = ReplayLayout::kWithTopic;
  size_t replay_buffer = 10000;  // batches kept for replay, as engines do
};

class EngineEndpoint {
 public:
  EngineEndpoint(zmq::context_t& context, EndpointOptions options);

  Status Bind();
  // Sends one batch with the next sequence number and keeps it for replay.
  // Fault injection: `live` false = not sent on PUB (a drop: the replay
  // still has it); `keep` false = not kept for replay either (a gap).
  Status Publish(std::span<const uint8_t> payload, bool live = true, bool keep = true);
  // Engine restart: the replay buffer is lost and seq starts at `first_seq`.
  void Restart(uint64_t first_seq);
  // The topic frame from now on (SGLang: a new epoch after a restart).
  void set_topic(std::string topic) { options_.topic = std::move(topic); }
  // First seq of a fresh publisher (TensorRT-LLM: time_ns(); others 0).
  void set_next_seq(uint64_t seq) { next_seq_ = seq; }
  // Takes new replay requests and sends every pending answer its next
  // chunk (kReplayChunk batches, or the rest and the end marker) without
  // blocking. Call while replay_pending() to finish them.
  void ServeReplay();
  bool replay_pending() const { return !pending_.empty(); }
  // For zmq_poll; nullptr without a replay socket.
  zmq::socket_t* replay_socket() { return replay_ ? &*replay_ : nullptr; }
  uint64_t next_seq() const { return next_seq_; }

  static constexpr size_t kReplayChunk = 64;

 private:
  struct PendingReplay {
    std::string identity;
    uint64_t next = 0;  // the next seq to send
    uint64_t end = 0;   // what the buffer held when asked: seqs below it
  };
  // Sends the next chunk of `pending`; true once its end marker is sent.
  bool AnswerChunk(PendingReplay& pending);

  EndpointOptions options_;
  zmq::socket_t pub_;
  std::optional<zmq::socket_t> replay_;
  std::deque<std::pair<uint64_t, std::string>> buffer_;
  uint64_t next_seq_ = 0;
  std::deque<PendingReplay> pending_;
};

}  // namespace kvindex::mockengine
