// TLS for the blocking HTTP client (client.h): an OpenSSL client session
// over an already connected non-blocking socket, the peer's certificate
// verified against a CA file (or the system's CAs) and the URL's host.
// Internal to shared/http.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "shared/base/status.h"

namespace kvindex::http::internal {

class TlsClient {
 public:
  // Waits until the socket is readable (`write` false) or writable: 1
  // ready, 0 timed out, -2 cancelled, -1 error.
  using Wait = std::function<int(bool write)>;

  ~TlsClient();
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;

  // The handshake on `fd` (which stays owned by the caller). `ca_file`
  // empty: the system's default CAs. Unavailable naming the reason (e.g.
  // "certificate verify failed") on failure, Cancelled when `wait` said so.
  static StatusOr<std::unique_ptr<TlsClient>> Connect(int fd, const std::string& host,
                                                      const std::string& ca_file, const Wait& wait);

  // As send()/recv() on a non-blocking socket: > 0 bytes, 0 the peer closed
  // (read), -1 an error (*error set), -2 would block (*want_write: the
  // direction to wait for).
  ssize_t Write(const char* data, size_t size, bool* want_write, std::string* error);
  ssize_t Read(char* data, size_t size, bool* want_write, std::string* error);

 private:
  struct Impl;
  explicit TlsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvindex::http::internal
