// Counts the connections a ZMQ socket lost. libzmq enforces ZMQ_MAXMSGSIZE
// by dropping the connection that sent the oversized message (the message
// is never read whole, which is the point), so a disconnect is the only
// trace of it; an engine that goes away shows the same way.
//
//   DisconnectMonitor monitor;
//   KVINDEX_RETURN_IF_ERROR(monitor.Attach(context, sub));
//   ... disconnects += monitor.Drain();   // on the socket's own thread
//   monitor.Detach();                      // before the socket closes
//
// Thread safety: use from the thread that owns the monitored socket.
#pragma once

#include <cstdint>
#include <memory>
#include <zmq.hpp>

#include "shared/base/status.h"

namespace kvindex::ingest::internal {

class DisconnectMonitor {
 public:
  DisconnectMonitor() = default;
  ~DisconnectMonitor() { Detach(); }
  DisconnectMonitor(const DisconnectMonitor&) = delete;
  DisconnectMonitor& operator=(const DisconnectMonitor&) = delete;

  // Starts monitoring `socket` (which must outlive the monitor or Detach()).
  Status Attach(zmq::context_t& context, zmq::socket_t& socket);
  // Disconnects reported since the last call; never blocks.
  uint64_t Drain();
  // Stops monitoring. Idempotent.
  void Detach();

 private:
  zmq::socket_t* monitored_ = nullptr;
  std::unique_ptr<zmq::socket_t> events_;  // PAIR, receives the monitor events
};

}  // namespace kvindex::ingest::internal
