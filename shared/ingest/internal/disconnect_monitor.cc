#include "shared/ingest/internal/disconnect_monitor.h"

#include <zmq.h>

#include <atomic>
#include <cstring>
#include <string>

#include "shared/base/strings.h"
#include "shared/ingest/internal/zmq_util.h"

namespace kvindex::ingest::internal {

Status DisconnectMonitor::Attach(zmq::context_t& context, zmq::socket_t& socket) {
  Detach();
  static std::atomic<uint64_t> next_id{0};
  const std::string endpoint = strings::Cat("inproc://kvindex-disconnect-monitor-",
                                            next_id.fetch_add(1, std::memory_order_relaxed));
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
    return ZmqError(zmq::error_t(), "socket monitor");
  }
  monitored_ = &socket;
  try {
    events_ = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pair);
    events_->set(zmq::sockopt::linger, 0);
    events_->connect(endpoint);
  } catch (const zmq::error_t& error) {
    Detach();
    return ZmqError(error, "socket monitor");
  }
  return absl::OkStatus();
}

uint64_t DisconnectMonitor::Drain() {
  if (events_ == nullptr) return 0;
  uint64_t disconnects = 0;
  try {
    zmq::message_t event;
    while (events_->recv(event, zmq::recv_flags::dontwait)) {
      // Frame 1: uint16 event id, uint32 value; frame 2: the endpoint.
      uint16_t id = 0;
      if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
      if (id == ZMQ_EVENT_DISCONNECTED) ++disconnects;
      while (event.more()) {
        if (!events_->recv(event, zmq::recv_flags::none)) break;
      }
    }
  } catch (const zmq::error_t&) {
    // Context terminating: nothing more to count.
  }
  return disconnects;
}

void DisconnectMonitor::Detach() {
  if (monitored_ != nullptr) {
    zmq_socket_monitor(monitored_->handle(), nullptr, 0);
    monitored_ = nullptr;
  }
  events_.reset();
}

}  // namespace kvindex::ingest::internal
