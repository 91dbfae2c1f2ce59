#include "services/bench/epp/match_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace kvindex::bench {

MatchClient::~MatchClient() { Close(); }

void MatchClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
}

Status MatchClient::Connect() {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Close();
    return absl::UnavailableError("connect 127.0.0.1:" + std::to_string(port_) + ": " +
                                  std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return absl::OkStatus();
}

StatusOr<int> MatchClient::Post(const std::string& json_body) {
  if (fd_ < 0) KVINDEX_RETURN_IF_ERROR(Connect());
  std::string request =
      "POST /v1/match HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(json_body.size()) + "\r\n\r\n";
  request += json_body;
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      Close();
      return absl::UnavailableError("send failed");
    }
    sent += static_cast<size_t>(n);
  }
  // Headers, then Content-Length bytes of body (the server always sends it).
  size_t header_end = std::string::npos, body_bytes = 0;
  int status = 0;
  char chunk[16384];
  while (true) {
    if (header_end == std::string::npos) {
      header_end = buffer_.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        status = std::atoi(buffer_.c_str() + buffer_.find(' ') + 1);
        const size_t at = buffer_.find("ontent-Length:");
        if (at == std::string::npos || at > header_end) {
          Close();
          return absl::UnavailableError("response without Content-Length");
        }
        body_bytes = std::strtoull(buffer_.c_str() + at + 14, nullptr, 10);
      }
    }
    if (header_end != std::string::npos && buffer_.size() >= header_end + 4 + body_bytes) {
      buffer_.erase(0, header_end + 4 + body_bytes);
      return status;
    }
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      Close();
      return absl::UnavailableError("connection closed");
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace kvindex::bench
