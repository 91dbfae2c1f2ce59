// ZmqReplayClient: the DEALER side of an engine's replay ROUTER socket
// (docs/wire-format.md section 1, "Replay").
//
// Each Fetch opens a fresh DEALER socket, sends ["", start_seq (8 B BE)] and
// reads replies of either layout (["", topic, seq, payload] or
// ["", seq, payload], told apart by frame count) until an end marker
// (["", "", ff*8, ""] or ["", ff*8, ""]). A fresh socket per request means a
// stream abandoned half-way (gap covered, timeout) can never leak stale
// replies into the next request. Replays are rare, so the connect cost is
// irrelevant.
//
//   ZmqReplayClient client(&context, {.endpoint = "tcp://127.0.0.1:5558"}, &stop, &counters);
//   Status s = client.Fetch(42, [](const ReplayMessage& m) { ...; return true; });
//
// The timeout bounds the silence before each reply (first included), so a
// healthy 10000-batch replay is never cut, and a dead server costs one
// timeout. The stop flag is checked every 50 ms.
//
// Thread safety: one thread per client (it owns its sockets during Fetch).
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <zmq.hpp>

#include "shared/ingest/source_session.h"

namespace kvindex::ingest {

struct ReplayClientOptions {
  // The engine's replay ROUTER endpoint. Required.
  std::string endpoint;
  // Longest wait for the next reply (the first one included). Default: 2 s.
  std::chrono::milliseconds timeout{2000};
  // ZMQ_MAXMSGSIZE of the DEALER socket; -1 = no limit. Default: -1.
  int64_t max_message_bytes = -1;
};

class ZmqReplayClient final : public ReplayFetcher {
 public:
  // `context` must outlive the client. `stop` (nullable): Fetch returns
  // Cancelled soon after it becomes true. `counters` (nullable): malformed
  // replies are counted in frames_invalid.
  ZmqReplayClient(zmq::context_t* context, ReplayClientOptions options,
                  const std::atomic<bool>* stop = nullptr, SessionCounters* counters = nullptr);

  Status Fetch(uint64_t start_seq,
               absl::FunctionRef<bool(const ReplayMessage&)> on_message) override;

 private:
  zmq::context_t* const context_;
  const ReplayClientOptions options_;
  const std::atomic<bool>* const stop_;
  SessionCounters* const counters_;
};

}  // namespace kvindex::ingest
