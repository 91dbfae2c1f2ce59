#include "shared/http/server.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

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
  EXPECT_FALSE(ParseUrl("https://x").ok());
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
