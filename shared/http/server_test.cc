#include "shared/http/server.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "shared/http/client.h"

namespace kvindex::http {
namespace {

ClientResponse Call(uint16_t port, std::string method, std::string path, std::string body = "",
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
  ClientRequest request;
  request.method = std::move(method);
  request.url.host = "127.0.0.1";
  request.url.port = port;
  request.path = std::move(path);
  request.body = std::move(body);
  request.headers = std::move(headers);
  auto response = Fetch(request);
  EXPECT_TRUE(response.ok()) << response.status();
  return response.ok() ? *response : ClientResponse{};
}

ServerOptions TestOptions() {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.threads = 4;
  options.max_body_bytes = 1024;
  return options;
}

void AddRoutes(Server& server) {
  server.Handle("POST", "/echo", [](const Request& request, Response& response) {
    // The padding after the body is readable and zero.
    for (size_t i = 0; i < kBodyPadding; ++i) {
      if (request.body.data()[request.body.size() + i] != 0) {
        SetError(response, 500, "padding not zero");
        return;
      }
    }
    response.content_type = "text/plain";
    response.body = std::string(request.body);
    response.headers.emplace_back("X-Test", std::string(request.Header("x-client")));
  });
  server.Handle("GET", "/healthz",
                [](const Request&, Response& response) {
                  response.content_type = "text/plain";
                  response.body = "ok\n";
                },
                {.open = true});
}

TEST(ServerTest, RoutesMethodsAndLimits) {
  Server server(TestOptions());
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  ASSERT_NE(server.port(), 0);

  auto echo = Call(server.port(), "POST", "/echo", "hello", {{"X-Client", "abc"}});
  EXPECT_EQ(echo.status, 200);
  EXPECT_EQ(echo.body, "hello");
  EXPECT_EQ(echo.Header("x-test"), "abc");

  auto empty = Call(server.port(), "POST", "/echo", "");
  EXPECT_EQ(empty.status, 200);
  EXPECT_EQ(empty.body, "");

  auto missing = Call(server.port(), "GET", "/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("\"error\""), std::string::npos);

  auto wrong = Call(server.port(), "GET", "/echo");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Header("allow"), "POST");

  auto big = Call(server.port(), "POST", "/echo", std::string(2000, 'x'));
  EXPECT_EQ(big.status, 413);
  EXPECT_NE(big.body.find("exceeds the limit of 1024 bytes"), std::string::npos);

  auto exact = Call(server.port(), "POST", "/echo", std::string(1024, 'y'));
  EXPECT_EQ(exact.status, 200);
  EXPECT_EQ(exact.body.size(), 1024u);
  server.Stop();
  server.Stop();
}

// Sends a raw request and returns everything the server answers until it
// closes or `wait_ms` passes.
std::string RawExchange(uint16_t port, const std::string& request, int wait_ms = 2000) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buffer[4096];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, wait_ms) == 1) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.find("\r\n\r\n") != std::string::npos &&
        out.find("Content-Length: ") != std::string::npos) {
      const size_t head = out.find("\r\n\r\n") + 4;
      const size_t length = std::stoul(out.substr(out.find("Content-Length: ") + 16));
      if (out.size() >= head + length) break;
    }
  }
  ::close(fd);
  return out;
}

TEST(ServerTest, ChunkedBodies) {
  Server server(TestOptions());
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  const std::string ok =
      RawExchange(server.port(),
                  "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  EXPECT_NE(ok.find("HTTP/1.1 200"), std::string::npos) << ok;
  EXPECT_NE(ok.find("hello world"), std::string::npos) << ok;
  std::string big = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) big += "200\r\n" + std::string(512, 'z') + "\r\n";
  big += "0\r\n\r\n";
  const std::string refused = RawExchange(server.port(), big);
  EXPECT_NE(refused.find("HTTP/1.1 413"), std::string::npos) << refused;
}

// Error messages echo client bytes (a header's value, a path): JSON-escaped
// and, where they are not UTF-8, replaced by U+FFFD, so every error body is
// valid JSON a client's parser accepts. Found by tests/fuzz/http_request_fuzz
// (an `Expect: \xff...` answered 417 with the raw byte in the JSON string).
TEST(ServerTest, ErrorBodiesAreValidUtf8) {
  Response response;
  SetError(response, 400,
           "a\xff"
           "b \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80"
           " \"\\\n \xe2\x82 \xc3");
  EXPECT_EQ(response.body,
            "{\"error\": \"a\xef\xbf\xbd"
            "b \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 "
            "\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \\\"\\\\\\n "
            "\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\"}\n");

  Server server(TestOptions());
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  const std::string answer = RawExchange(server.port(),
                                         "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: \xff\xfe"
                                         "100-continue\r\n\r\n");
  EXPECT_NE(answer.find("HTTP/1.1 417"), std::string::npos) << answer;
  EXPECT_NE(answer.find("{\"error\": \"unsupported Expect: \xef\xbf\xbd\xef\xbf\xbd"
                        "100-continue\"}"),
            std::string::npos)
      << answer;
  EXPECT_EQ(answer.find('\xff'), std::string::npos) << "a raw client byte in the body";
}

TEST(ServerTest, BearerToken) {
  ServerOptions options = TestOptions();
  options.bearer_token = "s3cret";
  Server server(options);
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(Call(server.port(), "POST", "/echo", "x").status, 401);
  EXPECT_EQ(Call(server.port(), "POST", "/echo", "x", {{"Authorization", "Bearer nope"}}).status,
            401);
  EXPECT_EQ(Call(server.port(), "POST", "/echo", "x", {{"Authorization", "Bearer s3cret"}}).status,
            200);
  EXPECT_EQ(Call(server.port(), "GET", "/healthz").status, 200);
}

TEST(ServerTest, StartStopTwice) {
  Server server(TestOptions());
  AddRoutes(server);
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(server.Start().ok());
    ASSERT_TRUE(server.Start().ok());  // no-op while running
    EXPECT_TRUE(server.running());
    EXPECT_EQ(Call(server.port(), "GET", "/healthz").body, "ok\n");
    server.Stop();
    EXPECT_FALSE(server.running());
  }
}

TEST(ServerTest, BadOptionsAndBusyPort) {
  ServerOptions bad = TestOptions();
  bad.listen = "nonsense";
  EXPECT_EQ(Server(bad).Start().code(), absl::StatusCode::kInvalidArgument);

  Server first(TestOptions());
  ASSERT_TRUE(first.Start().ok());
  ServerOptions same = TestOptions();
  same.listen = "127.0.0.1:" + std::to_string(first.port());
  Server second(same);
  EXPECT_EQ(second.Start().code(), absl::StatusCode::kUnavailable);
}

TEST(ServerTest, ListenAddressIsValidated) {
  for (const char* listen : {"999.1.1.1:1", "example.com:80", "[::1:80", "1.2.3:80", ":80"}) {
    ServerOptions options = TestOptions();
    options.listen = listen;
    EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument) << listen;
  }
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:8080", "localhost:0", "[::1]:0"}) {
    ServerOptions options = TestOptions();
    options.listen = listen;
    EXPECT_TRUE(options.Validate().ok()) << listen;
  }
}

TEST(ServerTest, HeadWhereGetExistsAndAuthBeforeRouting) {
  ServerOptions options = TestOptions();
  options.bearer_token = "s3cret";
  Server server(options);
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  const std::string head =
      RawExchange(server.port(), "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
  EXPECT_NE(head.find("Content-Length: 3"), std::string::npos) << head;
  EXPECT_EQ(head.find("ok\n"), std::string::npos) << head;  // no body
  // Without the token an unknown path is 401, not 404 (nothing learned).
  EXPECT_EQ(Call(server.port(), "GET", "/nope").status, 401);
  auto wrong = Call(server.port(), "DELETE", "/healthz");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Header("allow"), "GET, HEAD");
}

// A response larger than the socket takes at once: the event loop writes
// what it can, keeps the rest (the body moved, not copied) and finishes it
// asynchronously; the kept-alive connection then serves the next request,
// and HEAD of the same route sends the header alone.
TEST(ServerTest, LargeResponsesOnAKeptAliveConnection) {
  Server server(TestOptions());
  const std::string large(16 << 20, 'L');
  server.Handle("GET", "/large", [&](const Request&, Response& response) {
    response.content_type = "text/plain";
    response.body = large;
  });
  ASSERT_TRUE(server.Start().ok());
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  // Reads one response (header and Content-Length bytes of body).
  auto read_response = [&](std::string* head, std::string* body, bool head_only) {
    std::string in;
    char buffer[65536];
    size_t need = std::string::npos;
    pollfd p{fd, POLLIN, 0};
    while (in.size() < need && ::poll(&p, 1, 5000) == 1) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      in.append(buffer, static_cast<size_t>(n));
      const size_t end = in.find("\r\n\r\n");
      if (need == std::string::npos && end != std::string::npos) {
        const size_t at = in.find("Content-Length: ");
        need = end + 4 + (head_only ? 0 : std::stoul(in.substr(at + 16)));
      }
    }
    const size_t end = in.find("\r\n\r\n");
    if (end == std::string::npos) return;
    *head = in.substr(0, end + 4);
    *body = in.substr(end + 4);
  };
  for (int round = 0; round < 2; ++round) {
    const std::string request = "GET /large HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    // Let the server fill the socket before anything is read.
    ::usleep(100 * 1000);
    std::string head, body;
    read_response(&head, &body, false);
    EXPECT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
    EXPECT_EQ(body.size(), large.size()) << "round " << round;
    EXPECT_TRUE(body == large) << "round " << round;
  }
  const std::string request = "HEAD /large HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string head, body;
  read_response(&head, &body, true);
  EXPECT_NE(head.find("Content-Length: " + std::to_string(large.size())), std::string::npos)
      << head;
  EXPECT_TRUE(body.empty()) << body.size();
  ::close(fd);
  server.Stop();
}

// A connected loopback socket, from `source` (any 127.0.0.0/8 address:
// a different client to the server), or -1.
int Connect(uint16_t port, const char* source = nullptr) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (source != nullptr) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &local.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `data` (as much as the socket takes within `wait_ms`, stopping at
// an error: the server may answer and close early) and reads what comes
// back until a whole response, the close or `wait_ms`.
std::string SendAndRead(int fd, const std::string& data, int wait_ms = 3000) {
  size_t sent = 0;
  std::string out;
  char buffer[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < data.size() ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (p.revents & POLLIN) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
      const size_t head = out.find("\r\n\r\n");
      const size_t at = out.find("Content-Length: ");
      if (head != std::string::npos && at != std::string::npos &&
          out.size() >= head + 4 + std::stoul(out.substr(at + 16))) {
        break;
      }
    } else if (p.revents & POLLOUT) {
      const ssize_t n = ::send(fd, data.data() + sent, std::min<size_t>(data.size() - sent, 65536),
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN) sent = data.size();  // the server closed: read its answer
      if (n > 0) sent += static_cast<size_t>(n);
    } else {
      break;
    }
  }
  return out;
}

// The reproduction of issue #21: a chunk extension of 1 GiB (here 4 MiB,
// never ending) was buffered whole, before any authentication, even on the
// open /healthz. The chunk-size line is bounded by the 16 KiB read buffer:
// the server answers 431 long before the client is done.
TEST(ServerBoundsTest, ChunkExtensionIsBounded) {
  ServerOptions options = TestOptions();
  options.bearer_token = "s3cret";
  Server server(options);
  AddRoutes(server);
  server.Handle("GET", "/healthz", [](const Request&, Response& r) { r.body = "ok"; },
                {.open = true});
  ASSERT_TRUE(server.Start().ok());
  const int fd = Connect(server.port());
  ASSERT_GE(fd, 0);
  const std::string reply =
      SendAndRead(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                          std::string(4 << 20, 'e'));
  ::close(fd);
  EXPECT_NE(reply.find("HTTP/1.1 431"), std::string::npos) << reply.substr(0, 200);
  EXPECT_NE(reply.find("chunk-size line or trailer section"), std::string::npos) << reply;
  // A whole extension line, short of the buffer but past 256 bytes: 400.
  const std::string long_ext = RawExchange(
      server.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                         std::string(1000, 'e') + "\r\nx\r\n0\r\n\r\n");
  EXPECT_NE(long_ext.find("HTTP/1.1 400"), std::string::npos) << long_ext;
  EXPECT_NE(long_ext.find("chunk extension"), std::string::npos) << long_ext;
  // Short extensions are still accepted (and ignored).
  const std::string ok = RawExchange(server.port(),
                                     "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                     "chunked\r\n\r\n1;a=b\r\nx\r\n0\r\n\r\n");
  EXPECT_NE(ok.find("HTTP/1.1 200"), std::string::npos) << ok;
}

// Trailers (+160 MB per 100 MiB in the reproduction): the trailer section
// is bounded like the header.
TEST(ServerBoundsTest, TrailersAreBounded) {
  Server server(TestOptions());
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  const int fd = Connect(server.port());
  ASSERT_GE(fd, 0);
  std::string request =
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n";
  for (int i = 0; i < 40000; ++i) request += "X-Trailer-" + std::to_string(i) + ": vvvvvvvv\r\n";
  const std::string reply = SendAndRead(fd, request);
  ::close(fd);
  EXPECT_NE(reply.find("HTTP/1.1 431"), std::string::npos) << reply.substr(0, 200);
  // A small trailer section is fine.
  const std::string ok = RawExchange(server.port(),
                                     "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                     "chunked\r\n\r\n2\r\nhi\r\n0\r\nX-T: 1\r\n\r\n");
  EXPECT_NE(ok.find("HTTP/1.1 200"), std::string::npos) << ok;
  EXPECT_NE(ok.find("hi"), std::string::npos) << ok;
}

// A request line or header that never ends: 431 at 16 KiB.
TEST(ServerBoundsTest, RequestLineAndHeaderAreBounded) {
  Server server(TestOptions());
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  for (const std::string& start : {std::string("GET /"), std::string("GET / HTTP/1.1\r\nX: ")}) {
    const int fd = Connect(server.port());
    ASSERT_GE(fd, 0);
    const std::string reply = SendAndRead(fd, start + std::string(1 << 20, 'a'));
    ::close(fd);
    EXPECT_NE(reply.find("HTTP/1.1 431"), std::string::npos) << reply.substr(0, 200);
  }
}

// The global body budget: with room for two 1000-byte bodies, a third
// announced while two are in flight is refused with 503 + Retry-After,
// whether announced by Content-Length or by a chunk size; once they are
// done the next is served.
TEST(ServerBoundsTest, GlobalBodyBudget) {
  ServerOptions options = TestOptions();
  options.max_body_total_bytes = 2 * (1000 + kBodyPadding);
  Server server(options);
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  const std::string head =
      "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1000\r\n\r\n";
  const int a = Connect(server.port());
  const int b = Connect(server.port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(::send(a, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  ASSERT_EQ(::send(b, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  ::usleep(200 * 1000);
  const std::string third = RawExchange(server.port(), head + std::string(1000, 'c'));
  EXPECT_NE(third.find("HTTP/1.1 503"), std::string::npos) << third;
  EXPECT_NE(third.find("Retry-After: 1"), std::string::npos) << third;
  EXPECT_NE(third.find("memory budget"), std::string::npos) << third;
  const std::string chunked = RawExchange(
      server.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" +
                         std::string(1000, 'c') + "\r\n0\r\n\r\n");
  EXPECT_NE(chunked.find("HTTP/1.1 503"), std::string::npos) << chunked;
  // The two finish; their budget comes back.
  EXPECT_NE(SendAndRead(a, std::string(1000, 'a')).find("HTTP/1.1 200"), std::string::npos);
  EXPECT_NE(SendAndRead(b, std::string(1000, 'b')).find("HTTP/1.1 200"), std::string::npos);
  ::close(a);
  ::close(b);
  const std::string after = RawExchange(server.port(), head + std::string(1000, 'd'));
  EXPECT_NE(after.find("HTTP/1.1 200"), std::string::npos) << after;
}

TEST(ServerBoundsTest, DefaultsBoundBodyMemory) {
  const ServerOptions defaults;
  EXPECT_LE(defaults.max_body_total_bytes, size_t{64} << 20);
  EXPECT_GE(defaults.max_body_total_bytes, defaults.max_body_bytes);
  ServerOptions bad = TestOptions();
  bad.max_body_total_bytes = bad.max_body_bytes - 1;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// HTTP/1.1 framing the parser accepted: obs-fold, a missing or repeated
// Host, an encoded '/' in the path.
TEST(ServerBoundsTest, HostObsFoldAndEncodedSlash) {
  Server server(TestOptions());
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  auto status_of = [&](const std::string& request) {
    const std::string reply = RawExchange(server.port(), request);
    return reply.size() >= 12 ? reply.substr(9, 3) : reply;
  };
  EXPECT_EQ(status_of("GET /healthz HTTP/1.1\r\n\r\n"), "400");
  EXPECT_EQ(status_of("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), "400");
  EXPECT_EQ(status_of("GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n"), "400");
  EXPECT_EQ(status_of("GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\tfolded\r\n\r\n"), "400");
  EXPECT_EQ(status_of("GET /healthz HTTP/1.1\nHost: x\n\n"), "400");
  EXPECT_EQ(status_of("GET /a%2Fb HTTP/1.1\r\nHost: x\r\n\r\n"), "400");
  EXPECT_EQ(status_of("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), "200");
  // HTTP/1.0 needs no Host.
  EXPECT_EQ(status_of("GET /healthz HTTP/1.0\r\n\r\n"), "200");
  const std::string missing = RawExchange(server.port(), "GET /healthz HTTP/1.1\r\n\r\n");
  EXPECT_NE(missing.find("missing Host"), std::string::npos) << missing;
}

// The reproduction of issue #21: 1,024 idle connections from one client
// kept every other request out (503) until the idle timeout. At the limit
// the oldest idle connection is closed for a new one.
TEST(ServerBoundsTest, IdleConnectionsDoNotStarveTheApi) {
  ServerOptions options = TestOptions();
  options.max_connections = 16;
  options.max_connections_per_client = 16;
  Server server(options);
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(Connect(server.port()));
    ASSERT_GE(idle.back(), 0);
  }
  ::usleep(200 * 1000);
  for (int round = 0; round < 3; ++round) {
    auto echo = Call(server.port(), "POST", "/echo", "x");
    EXPECT_EQ(echo.status, 200) << echo.body;
  }
  // The first request closed the oldest idle connection (the server's FIN
  // is readable as EOF); the next ones took the slot it left, unless the
  // server had not yet seen the previous request's client close its
  // connection (a loaded machine): then each closed one more, never more.
  int closed = 0;
  for (int fd : idle) {
    pollfd p{fd, POLLIN, 0};
    char byte;
    if (::poll(&p, 1, 100) == 1 && ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0) ++closed;
    ::close(fd);
  }
  EXPECT_GE(closed, 1);
  EXPECT_LE(closed, 3);
}

// A client holding busy (not idle) connections is capped per address:
// another client (127.0.0.2 is another address on loopback) is served.
TEST(ServerBoundsTest, PerClientConnectionLimit) {
  ServerOptions options = TestOptions();
  options.max_connections = 8;
  options.max_connections_per_client = 4;
  Server server(options);
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    const int fd = Connect(server.port(), "127.0.0.2");
    ASSERT_GE(fd, 0);
    const std::string half = "POST /echo HTTP/1.1\r\nHost: x\r\n";
    ::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    held.push_back(fd);
  }
  ::usleep(200 * 1000);
  // The same client's fifth: only probes (503 for the API).
  const int fifth = Connect(server.port(), "127.0.0.2");
  ASSERT_GE(fifth, 0);
  const std::string refused =
      SendAndRead(fifth, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx");
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  ::close(fifth);
  // Another client: served.
  EXPECT_EQ(Call(server.port(), "POST", "/echo", "x").status, 200);
  for (int fd : held) ::close(fd);
}

// An offloaded route (a checkpoint export) runs off the I/O thread: with
// one I/O thread and the handler blocked, other routes are served; a
// second request for an offloaded route meanwhile is 503 + Retry-After.
TEST(ServerBoundsTest, OffloadedRouteOneAtATimeOffTheIoThread) {
  ServerOptions options = TestOptions();
  options.threads = 1;
  Server server(options);
  AddRoutes(server);
  std::atomic<bool> release{false};
  std::atomic<int> running{0};
  server.Handle("GET", "/slow",
                [&](const Request&, Response& response) {
                  running.fetch_add(1);
                  while (!release.load()) ::usleep(1000);
                  response.body = "done";
                },
                {.offload = true});
  ASSERT_TRUE(server.Start().ok());
  std::string first;
  std::thread slow(
      [&] { first = RawExchange(server.port(), "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", 5000); });
  for (int i = 0; i < 200 && running.load() == 0; ++i) ::usleep(5000);
  ASSERT_EQ(running.load(), 1);
  EXPECT_EQ(Call(server.port(), "GET", "/healthz").status, 200);  // the I/O thread is free
  auto second = Call(server.port(), "GET", "/slow");
  EXPECT_EQ(second.status, 503) << second.body;
  EXPECT_EQ(second.Header("retry-after"), "1");
  release.store(true);
  slow.join();
  EXPECT_NE(first.find("HTTP/1.1 200"), std::string::npos) << first;
  EXPECT_NE(first.find("done"), std::string::npos) << first;
  EXPECT_EQ(Call(server.port(), "GET", "/slow").status, 200);  // the slot came back
  server.Stop();
}

// The former server stays buildable and serving for the benchmark comparison.
TEST(ServerTest, ThreadPerConnectionBackendServes) {
  ServerOptions options = TestOptions();
  options.backend = Backend::kThreadPerConnection;
  Server server(options);
  AddRoutes(server);
  ASSERT_TRUE(server.Start().ok());
  auto echo = Call(server.port(), "POST", "/echo", "hello", {{"X-Client", "abc"}});
  EXPECT_EQ(echo.status, 200);
  EXPECT_EQ(echo.body, "hello");
  EXPECT_EQ(echo.Header("x-test"), "abc");
  EXPECT_EQ(Call(server.port(), "POST", "/echo", std::string(2000, 'x')).status, 413);
  server.Stop();
}

TEST(ClientTest, ParseUrl) {
  auto url = ParseUrl("http://localhost:8080/api/");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "localhost");
  EXPECT_EQ(url->port, 8080);
  EXPECT_EQ(url->base_path, "/api");
  EXPECT_EQ(ParseUrl("127.0.0.1:9")->port, 9);
  EXPECT_EQ(ParseUrl("http://[::1]:81")->host, "::1");
  auto https = ParseUrl("https://peer.example/api");
  ASSERT_TRUE(https.ok());
  EXPECT_TRUE(https->tls);
  EXPECT_EQ(https->port, 443);
  EXPECT_EQ(https->host, "peer.example");
  EXPECT_FALSE(ParseUrl("http://x")->tls);
  EXPECT_FALSE(ParseUrl("http://x:0").ok());
  EXPECT_FALSE(ParseUrl("http://x:abc").ok());
}

TEST(ClientTest, ConnectionRefused) {
  ClientRequest request;
  request.url.host = "127.0.0.1";
  request.url.port = 1;
  EXPECT_EQ(Fetch(request).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvindex::http
