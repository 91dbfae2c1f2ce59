// MatchClient: POST /v1/match over one kept-alive HTTP/1.1 connection, the
// closed-loop client the endpoint picker's gRPC figures are set beside
// (shared/http/client.h opens a connection per request; a gateway or router
// keeps its connections).
//
//   MatchClient client(port);
//   auto status = client.Post(body);   // 200, the body read in full
//
// Thread safety: one MatchClient per thread.
#pragma once

#include <cstdint>
#include <string>

#include "shared/base/status.h"

namespace kvindex::bench {

class MatchClient {
 public:
  explicit MatchClient(uint16_t port) : port_(port) {}
  ~MatchClient();
  MatchClient(const MatchClient&) = delete;
  MatchClient& operator=(const MatchClient&) = delete;

  // The response's HTTP status; Unavailable when the connection fails
  // (the next call reconnects).
  StatusOr<int> Post(const std::string& json_body);

 private:
  Status Connect();
  void Close();

  const uint16_t port_;
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace kvindex::bench
