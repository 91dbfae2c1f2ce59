#include "shared/ingest/replay_client.h"

#include <algorithm>

#include "shared/base/strings.h"
#include "shared/ingest/internal/zmq_util.h"

namespace kvindex::ingest {
namespace {
constexpr std::chrono::milliseconds kPollSlice{50};
}  // namespace

ZmqReplayClient::ZmqReplayClient(zmq::context_t* context, ReplayClientOptions options,
                                 const std::atomic<bool>* stop, SessionCounters* counters)
    : context_(context), options_(std::move(options)), stop_(stop), counters_(counters) {}

Status ZmqReplayClient::Fetch(uint64_t start_seq,
                              absl::FunctionRef<bool(const ReplayMessage&)> on_message) {
  try {
    zmq::socket_t socket(*context_, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    // Room for a whole engine buffer (10000 batches) in flight.
    socket.set(zmq::sockopt::rcvhwm, 100000);
    socket.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
    KVINDEX_RETURN_IF_ERROR(internal::Attach(socket, options_.endpoint, /*bind=*/false));
    uint8_t seq[kSeqBytes];
    EncodeSeq(start_seq, seq);
    if (!socket.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !socket.send(zmq::buffer(seq, sizeof(seq)), zmq::send_flags::dontwait)) {
      return absl::UnavailableError(
          strings::Cat("replay request to ", options_.endpoint, " could not be queued"));
    }
    internal::Multipart message;
    auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (true) {
      if (stop_ != nullptr && stop_->load(std::memory_order_relaxed)) {
        return absl::CancelledError("replay cancelled: stopping");
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        return absl::DeadlineExceededError(strings::Cat("no replay reply from ", options_.endpoint,
                                                        " within ", options_.timeout.count(),
                                                        " ms (from seq ", start_seq, ")"));
      }
      const auto wait =
          std::min(kPollSlice, std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
      KVINDEX_ASSIGN_OR_RETURN(bool readable, internal::WaitReadable(socket, wait));
      if (!readable) continue;
      KVINDEX_ASSIGN_OR_RETURN(bool received, internal::ReceiveMultipart(socket, &message));
      if (!received) continue;
      ReplayMessage reply;
      const FrameError error =
          message.oversized ? FrameError::kFrameCount : ParseReplayMessage(message.frames, &reply);
      if (error != FrameError::kNone) {
        if (counters_ != nullptr) {
          counters_->frames_invalid[static_cast<int>(error)].fetch_add(1,
                                                                       std::memory_order_relaxed);
        }
        return absl::DataLossError(strings::Cat("malformed replay reply from ", options_.endpoint,
                                                ": ", FrameErrorLabel(error)));
      }
      if (reply.end) return absl::OkStatus();
      if (!on_message(reply)) return absl::OkStatus();
      deadline = std::chrono::steady_clock::now() + options_.timeout;
    }
  } catch (const zmq::error_t& error) {
    return internal::ZmqError(error, strings::Cat("replay ", options_.endpoint));
  }
}

}  // namespace kvindex::ingest
