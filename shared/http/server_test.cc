#include "shared/http/server.h"

#include <gtest/gtest.h>

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
