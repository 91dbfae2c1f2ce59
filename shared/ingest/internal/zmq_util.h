// ZMQ helpers shared by the subscriber and the replay client. cppzmq throws
// zmq::error_t; these catch it and return Status, so no exception leaves
// kvindex_ingest.
//
// Thread safety: functions operate on one socket, which must be used by one
// thread at a time.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/base/status.h"
#include "shared/ingest/frames.h"

namespace kvindex::ingest::internal {

// Frames kept per message; longer messages are drained and reported as
// oversized (they are malformed anyway).
inline constexpr size_t kMaxFrames = 8;

struct Multipart {
  std::vector<zmq::message_t> parts;
  std::vector<Frame> frames;  // views into `parts`
  bool oversized = false;
};

// Receives one whole multipart message without blocking. Returns false when
// none is pending. Throws nothing.
StatusOr<bool> ReceiveMultipart(zmq::socket_t& socket, Multipart* out);

// Polls `socket` for input for at most `timeout`. Returns true when readable.
StatusOr<bool> WaitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout);

// Connects or binds; InvalidArgument for a malformed endpoint, Unavailable
// for anything else (address in use, ...). The message names the endpoint.
Status Attach(zmq::socket_t& socket, const std::string& endpoint, bool bind);

// "zmq error on <what>: <strerror>".
Status ZmqError(const zmq::error_t& error, std::string_view what);

}  // namespace kvindex::ingest::internal
