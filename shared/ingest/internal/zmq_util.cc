#include "shared/ingest/internal/zmq_util.h"

#include "shared/base/strings.h"

namespace kvindex::ingest::internal {

Status ZmqError(const zmq::error_t& error, std::string_view what) {
  const std::string message = strings::Cat("zmq error on ", what, ": ", error.what());
  if (error.num() == EINVAL || error.num() == EPROTONOSUPPORT || error.num() == ENOCOMPATPROTO) {
    return absl::InvalidArgumentError(message);
  }
  if (error.num() == ETERM) return absl::CancelledError(message);
  return absl::UnavailableError(message);
}

StatusOr<bool> ReceiveMultipart(zmq::socket_t& socket, Multipart* out) {
  out->parts.clear();
  out->frames.clear();
  out->oversized = false;
  try {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::dontwait)) return false;
    while (true) {
      const bool more = part.more();
      if (out->parts.size() < kMaxFrames) {
        out->parts.push_back(std::move(part));
      } else {
        out->oversized = true;
      }
      if (!more) break;
      // The remaining parts of a message arrive atomically with the first.
      part = zmq::message_t();
      if (!socket.recv(part, zmq::recv_flags::none)) break;
    }
  } catch (const zmq::error_t& error) {
    return ZmqError(error, "receive");
  }
  out->frames.reserve(out->parts.size());
  for (const zmq::message_t& part : out->parts) {
    out->frames.emplace_back(static_cast<const uint8_t*>(part.data()), part.size());
  }
  return true;
}

StatusOr<bool> WaitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  try {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, timeout);
    return (item.revents & ZMQ_POLLIN) != 0;
  } catch (const zmq::error_t& error) {
    if (error.num() == EINTR) return false;
    return ZmqError(error, "poll");
  }
}

Status Attach(zmq::socket_t& socket, const std::string& endpoint, bool bind) {
  try {
    if (bind) {
      socket.bind(endpoint);
    } else {
      socket.connect(endpoint);
    }
  } catch (const zmq::error_t& error) {
    return ZmqError(error, strings::Cat(bind ? "bind " : "connect ", endpoint));
  }
  return absl::OkStatus();
}

}  // namespace kvindex::ingest::internal
