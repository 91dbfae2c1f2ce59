// libFuzzer target for the router's HTTP request parsing: the event-loop
// http::Server (shared/http/server_event_loop.cc: Beast's parser plus our
// checks of the request line, headers, Content-Length / chunked framing,
// Expect, the header, chunk-line, body and budget limits, pipelining)
// serving the real RouterApi (router_fixture.h) on 127.0.0.1, with a bearer
// token, an offloaded route and an echo route. Each input is the bytes of
// one client connection: sent whole, then the client half-closes and reads
// until the server closes.
//
// Invariants (abort = finding):
// - the server closes the connection within 10 s (its own deadlines are
//   2 s): no input holds it open after the client is done;
// - everything it sends parses as a sequence of HTTP/1.1 responses, each
//   with a status from the documented set (never 500: no handler throws),
//   each non-1xx one with a JSON body, an {"error": ...} object when >= 400;
// - the echo handler sees a body within max_body_bytes followed by
//   kBodyPadding zero bytes;
// - the server keeps answering (the next input connects and is served).
// Plus ASan/UBSan on the server's parsing and the handlers, and libFuzzer's
// RSS limit for memory held across connections.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "shared/http/server.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/router_fixture.h"

namespace {

namespace bhttp = boost::beast::http;

constexpr size_t kMaxBody = 64 * 1024;

kvindex::http::Server& TheServer() {
  static kvindex::http::Server* server = [] {
    kvindex::fuzz::Router& router = kvindex::fuzz::TheRouter();
    kvindex::http::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.threads = 1;
    options.max_body_bytes = kMaxBody;
    options.max_body_total_bytes = 2 * kMaxBody;
    options.idle_timeout_ms = 2000;
    options.header_timeout_ms = 2000;
    options.body_timeout_ms = 2000;
    options.bearer_token = "fuzz-token";
    auto* s = new kvindex::http::Server(options);
    router.api->Register(*s);
    s->Handle("POST", "/fuzz/echo",
              [](const kvindex::http::Request& request, kvindex::http::Response& response) {
                FUZZ_CHECK(request.body.size() <= kMaxBody, "a body within max_body_bytes");
                for (size_t i = 0; i < kvindex::http::kBodyPadding; ++i) {
                  FUZZ_CHECK(request.body.data()[request.body.size() + i] == 0,
                             "kBodyPadding zero bytes follow the body");
                }
                response.body = "{\"size\": " + std::to_string(request.body.size()) + "}";
              });
    FUZZ_CHECK(s->Start().ok(), "server starts");
    return s;
  }();
  return *server;
}

bool Known(int status) {
  switch (status) {
    case 100:
    case 200:
    case 400:
    case 401:
    case 404:
    case 405:
    case 408:
    case 409:
    case 413:
    case 417:
    case 431:
    case 503:
      return true;
    default:
      return false;
  }
}

// Every response in `bytes`: status, JSON body. A response to HEAD has a
// Content-Length and no body: one whose header is followed by nothing or by
// the next response is parsed as such.
// `reset`: the server reset the connection (it closed with request bytes
// unread, e.g. pipelined after "Connection: close"), which may drop the end
// of what it sent: the last response may then be incomplete.
void CheckResponses(std::string_view bytes, bool reset) {
  while (!bytes.empty()) {
    const size_t header_end = bytes.find("\r\n\r\n");
    if (reset && header_end == std::string_view::npos) return;
    FUZZ_CHECK(header_end != std::string_view::npos, "a whole response header");
    const std::string_view rest = bytes.substr(header_end + 4);
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    parser.skip(rest.empty() || rest.starts_with("HTTP/1.1 "));
    boost::beast::error_code ec;
    size_t used = 0;
    while (!parser.is_done() && used < bytes.size()) {
      const size_t n =
          parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
      used += n;
      if (ec == bhttp::error::need_more) ec = {};
      if (ec || n == 0) break;
    }
    if (reset && !ec && !parser.is_done()) return;
    FUZZ_CHECK(!ec && parser.is_done(), "the server's bytes are whole HTTP responses");
    const auto& response = parser.get();
    const int status = static_cast<int>(response.result_int());
    FUZZ_CHECK(Known(status), "a documented status");
    FUZZ_CHECK(response.version() == 11, "HTTP/1.1");
    bytes.remove_prefix(used);
    if (status < 200) continue;
    const std::string& body = response.body();
    if (body.empty()) continue;  // HEAD
    if (response[bhttp::field::content_type].starts_with("application/json")) {
      // The body as a client's parser reads it: nlohmann::json refuses
      // invalid UTF-8 (error messages echo client bytes, e.g. an
      // unsupported Expect value: the escaper replaces what is not UTF-8).
      const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
      FUZZ_CHECK(!json.is_discarded(), "a JSON answer parses");
      if (status >= 400) {
        FUZZ_CHECK(json.is_object() && json.contains("error"), "an error is {\"error\": ...}");
      }
    }
  }
}

std::string Exchange(uint16_t port, std::string_view input, bool* reset) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Thousands of connections a second can run the loopback out of ports
  // for a moment (EADDRNOTAVAIL): retry for up to 2 s.
  int connected = -1;
  for (int attempt = 0; attempt < 200 && connected != 0; ++attempt) {
    connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    if (connected != 0 && errno == EINTR) {
      // libFuzzer's alarm interrupted it; the connect goes on: wait for it.
      pollfd p{fd, POLLOUT, 0};
      while (poll(&p, 1, 2000) < 0 && errno == EINTR) {
      }
      int error = 0;
      socklen_t length = sizeof(error);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      connected = error == 0 && (p.revents & POLLOUT) ? 0 : -1;
      errno = error;
      if (connected != 0) break;
    }
    if (connected != 0 && errno != EADDRNOTAVAIL && errno != EAGAIN) break;
    if (connected != 0) usleep(10000);
  }
  if (connected != 0) std::fprintf(stderr, "connect: %s\n", std::strerror(errno));
  FUZZ_CHECK(connected == 0, "the server accepts a connection");
  std::string received;
  char buffer[16384];
  size_t sent = 0;
  bool half_closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    FUZZ_CHECK(left.count() > 0, "the server closes the connection in time");
    if (sent == input.size() && !half_closed) {
      shutdown(fd, SHUT_WR);
      half_closed = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (half_closed ? 0 : POLLOUT)), 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n < 0) *reset = true;
      if (n <= 0) break;
      received.append(buffer, static_cast<size_t>(n));
      FUZZ_CHECK(received.size() < (size_t{64} << 20), "answers bounded");
      continue;
    }
    if ((p.revents & POLLOUT) && !half_closed) {
      const ssize_t n = send(fd, input.data() + sent, input.size() - sent, MSG_NOSIGNAL);
      if (n < 0) {
        sent = input.size();  // the server closed: read what it said
      } else {
        sent += static_cast<size_t>(n);
      }
    }
  }
  // Reset rather than TIME_WAIT: thousands of connections a second.
  linger abort_close{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
  close(fd);
  return received;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;
  kvindex::http::Server& server = TheServer();
  bool reset = false;
  const std::string received =
      Exchange(server.port(), std::string_view(reinterpret_cast<const char*>(data), size), &reset);
  CheckResponses(received, reset);
  return 0;
}
