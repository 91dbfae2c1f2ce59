// ZMQ fixtures for kvindex_ingest integration tests (not part of the
// library): an XPUB engine publisher that can tell when a subscriber's
// subscription is live (no slow-joiner sleeps), and a real ROUTER replay
// server serving either reply layout.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "shared/ingest/testing/test_util.h"

namespace kvindex::ingest::testing {

inline std::string LastEndpoint(zmq::socket_t& socket) {
  return socket.get(zmq::sockopt::last_endpoint);
}

// A loopback tcp port that was free a moment ago (an OS socket bound to port
// 0 and closed synchronously; a ZMQ socket would release it asynchronously).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

// The engine's PUB socket. XPUB so the test can wait for the subscription.
class EnginePublisher {
 public:
  // bind_endpoint empty: bind tcp://127.0.0.1:* (the agent connects);
  // otherwise connect to the agent's bound endpoint when connect = true.
  explicit EnginePublisher(zmq::context_t& context, const std::string& endpoint = "",
                           bool connect = false)
      : socket_(context, zmq::socket_type::xpub) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::xpub_verbose, 1);
    if (connect) {
      socket_.connect(endpoint);
      endpoint_ = endpoint;
    } else {
      socket_.bind(endpoint.empty() ? "tcp://127.0.0.1:*" : endpoint);
      endpoint_ = LastEndpoint(socket_);
    }
  }
  const std::string& endpoint() const { return endpoint_; }

  // Waits until a subscriber's subscription arrived (10 s at most).
  bool WaitForSubscriber(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if (item.revents & ZMQ_POLLIN) {
        zmq::message_t message;
        if (socket_.recv(message, zmq::recv_flags::dontwait) && message.size() >= 1 &&
            static_cast<const uint8_t*>(message.data())[0] == 1) {
          return true;
        }
      }
    }
    return false;
  }

  void Send(uint64_t seq, const std::string& payload, const std::string& topic = "kv-events") {
    SendFrames({topic, SeqBytes(seq), payload});
  }
  void SendFrames(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
};

// A replay ROUTER socket like vLLM's: for ["", start_seq] it sends every
// buffered batch with seq >= start_seq, then the end marker.
class ReplayServer {
 public:
  enum class Layout { kWithTopic, kWithoutTopic };
  enum class Mode { kNormal, kSilent, kMalformed };

  ReplayServer(zmq::context_t& context, Layout layout)
      : layout_(layout), socket_(context, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = LastEndpoint(socket_);
    thread_ = std::thread([this] { Run(); });
  }
  ~ReplayServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

  void Add(uint64_t seq, std::string payload, std::string topic = "kv-events") {
    MutexLock lock(&mu_);
    buffer_[seq] = {std::move(topic), std::move(payload)};
  }
  void set_mode(Mode mode) { mode_ = mode; }
  std::vector<uint64_t> requests() const {
    MutexLock lock(&mu_);
    return requests_;
  }

 private:
  void Run() {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    while (!stop_) {
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> parts;
      zmq::message_t part;
      do {
        if (!socket_.recv(part, zmq::recv_flags::none)) break;
        parts.push_back(std::move(part));
        part = zmq::message_t();
      } while (parts.back().more());
      if (parts.size() != 3 || parts[2].size() != 8) continue;
      const uint64_t start =
          DecodeSeq({static_cast<const uint8_t*>(parts[2].data()), parts[2].size()});
      const std::string identity = parts[0].to_string();
      std::vector<std::pair<uint64_t, std::pair<std::string, std::string>>> batches;
      {
        MutexLock lock(&mu_);
        requests_.push_back(start);
        for (auto it = buffer_.lower_bound(start); it != buffer_.end(); ++it) {
          batches.emplace_back(it->first, it->second);
        }
      }
      const Mode mode = mode_;
      if (mode == Mode::kSilent) continue;
      if (mode == Mode::kMalformed) {
        Reply({identity, "", "oops"});
        continue;
      }
      for (const auto& [seq, batch] : batches) {
        if (layout_ == Layout::kWithTopic) {
          Reply({identity, "", batch.first, SeqBytes(seq), batch.second});
        } else {
          Reply({identity, "", SeqBytes(seq), batch.second});
        }
      }
      const std::string end(8, '\xff');
      if (layout_ == Layout::kWithTopic) {
        Reply({identity, "", "", end, ""});
      } else {
        Reply({identity, "", end, ""});
      }
    }
  }
  void Reply(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  const Layout layout_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<Mode> mode_{Mode::kNormal};
  mutable Mutex mu_;
  std::map<uint64_t, std::pair<std::string, std::string>> buffer_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::ingest::testing
