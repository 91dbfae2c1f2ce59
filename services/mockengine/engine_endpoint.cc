#include "services/mockengine/engine_endpoint.h"

#include <algorithm>
#include <array>
#include <vector>
#include <zmq_addon.hpp>

namespace kvindex::mockengine {
namespace {

std::array<uint8_t, 8> BigEndian(uint64_t value) {
  std::array<uint8_t, 8> bytes;
  for (int i = 7; i >= 0; --i) {
    bytes[i] = static_cast<uint8_t>(value & 0xff);
    value >>= 8;
  }
  return bytes;
}

uint64_t FromBigEndian(const zmq::message_t& message) {
  uint64_t value = 0;
  const auto* data = static_cast<const uint8_t*>(message.data());
  for (size_t i = 0; i < 8; ++i) value = (value << 8) | data[i];
  return value;
}

constexpr uint64_t kEndMarker = ~uint64_t{0};

}  // namespace

EngineEndpoint::EngineEndpoint(zmq::context_t& context, EndpointOptions options)
    : options_(std::move(options)), pub_(context, zmq::socket_type::pub) {
  if (!options_.replay_endpoint.empty()) replay_.emplace(context, zmq::socket_type::router);
}

Status EngineEndpoint::Bind() {
  try {
    pub_.set(zmq::sockopt::sndhwm, 100000);
    pub_.set(zmq::sockopt::linger, 0);
    pub_.bind(options_.pub_endpoint);
    if (replay_) {
      replay_->set(zmq::sockopt::linger, 0);
      // A ROUTER drops, silently, what exceeds its send HWM (libzmq default:
      // 1,000 messages). One answer is up to replay_buffer batches, queued at
      // once: an agent restarted late in a run (a replay from seq 0) lost
      // batches in mid-stream whenever its I/O lagged, saw a gap inside the
      // replay and cleared a source the ground truth said it still held
      // (issue #26). No limit: the buffer bounds every answer.
      replay_->set(zmq::sockopt::sndhwm, 0);
      replay_->bind(options_.replay_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError("cannot bind " + options_.pub_endpoint + " / " +
                                  options_.replay_endpoint + ": " + e.what());
  }
  return absl::OkStatus();
}

Status EngineEndpoint::Publish(std::span<const uint8_t> payload, bool live, bool keep) {
  const uint64_t seq = next_seq_++;
  const auto seq_bytes = BigEndian(seq);
  if (live) try {
      pub_.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore);
      pub_.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
      pub_.send(zmq::const_buffer(payload.data(), payload.size()), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(std::string("publish failed: ") + e.what());
    }
  if (!keep) return absl::OkStatus();
  buffer_.emplace_back(seq, std::string(payload.begin(), payload.end()));
  while (buffer_.size() > options_.replay_buffer) buffer_.pop_front();
  return absl::OkStatus();
}

void EngineEndpoint::Restart(uint64_t first_seq) {
  buffer_.clear();
  next_seq_ = first_seq;
  // What was asked of the previous run ends here (its end marker next).
  for (PendingReplay& pending : pending_) pending.end = pending.next;
}

void EngineEndpoint::ServeReplay() {
  if (!replay_) return;
  while (true) {
    std::vector<zmq::message_t> request;
    try {
      const auto received =
          zmq::recv_multipart(*replay_, std::back_inserter(request), zmq::recv_flags::dontwait);
      if (!received) break;
    } catch (const zmq::error_t&) {
      break;
    }
    // [identity, "", start_seq]; anything else is ignored. The answer is
    // what the buffer holds now, from start_seq.
    if (request.size() != 3 || request[2].size() != 8) continue;
    pending_.push_back({request[0].to_string(), FromBigEndian(request[2]), next_seq_});
  }
  // Every pending answer gets its next chunk: a long answer (an agent
  // restarted late in a run asks from seq 0) no longer holds back the other
  // requesters, which time out after a silence (the agent's replay_timeout,
  // 2 s in the tests) and fail their sources closed.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (AnswerChunk(*it)) {
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

bool EngineEndpoint::AnswerChunk(PendingReplay& pending) {
  auto send_frames = [&](std::initializer_list<zmq::const_buffer> frames) {
    replay_->send(zmq::buffer(pending.identity), zmq::send_flags::sndmore);
    replay_->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
    size_t i = 0;
    for (const auto& frame : frames) {
      const bool last = ++i == frames.size();
      replay_->send(frame, last ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
  };
  try {
    // buffer_ is in seq order (a restart empties it).
    auto next = std::lower_bound(buffer_.begin(), buffer_.end(), pending.next,
                                 [](const std::pair<uint64_t, std::string>& entry, uint64_t seq) {
                                   return entry.first < seq;
                                 });
    for (size_t sent = 0; next != buffer_.end() && next->first < pending.end; ++next, ++sent) {
      if (sent == kReplayChunk) return false;
      const auto& [seq, payload] = *next;
      const auto seq_bytes = BigEndian(seq);
      if (options_.layout == ReplayLayout::kWithTopic) {
        send_frames({zmq::buffer(options_.topic), zmq::buffer(seq_bytes), zmq::buffer(payload)});
      } else {
        send_frames({zmq::buffer(seq_bytes), zmq::buffer(payload)});
      }
      pending.next = seq + 1;
    }
    const auto end = BigEndian(kEndMarker);
    if (options_.layout == ReplayLayout::kWithTopic) {
      send_frames({zmq::const_buffer(nullptr, 0), zmq::buffer(end), zmq::const_buffer(nullptr, 0)});
    } else {
      send_frames({zmq::buffer(end), zmq::const_buffer(nullptr, 0)});
    }
  } catch (const zmq::error_t&) {
    // The requester went away; nothing to recover.
  }
  return true;
}

}  // namespace kvindex::mockengine
