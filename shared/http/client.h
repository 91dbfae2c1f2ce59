// A tiny blocking HTTP/1.1 client over plain sockets (or TLS, for https://
// URLs: OpenSSL, the peer's certificate verified), for kvindex-ctl, the
// router's bootstrap and tests. One request per connection (Connection:
// close); no redirects, no chunked request bodies. For anything heavier use
// curl.
//
//   KVINDEX_ASSIGN_OR_RETURN(auto url, ParseUrl("http://127.0.0.1:8080"));
//   KVINDEX_ASSIGN_OR_RETURN(auto reply,
//       Fetch({.method = "POST", .url = url, .path = "/v1/match", .body = json}));
//   reply.status, reply.body
//
// Thread safety: stateless; call from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::http {

struct Url {
  std::string host;  // name or IPv4/IPv6 literal (without brackets)
  uint16_t port = 80;
  bool tls = false;       // https://
  std::string base_path;  // path prefix from the URL, without trailing '/'
};

// Accepts "http://host[:port][/prefix]", "https://host[:port][/prefix]"
// (port 443 by default), "host:port" and ":port". InvalidArgument for
// anything else.
StatusOr<Url> ParseUrl(std::string_view text);

struct ClientRequest {
  std::string method = "GET";
  Url url;
  std::string path = "/";  // appended to url.base_path
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds timeout{10000};  // whole exchange
  // Largest response body accepted; past it (or a Content-Length past it)
  // ResourceExhausted, before more is read. Default: 256 MiB.
  uint64_t max_response_bytes = uint64_t{256} << 20;
  // Refuse a response without Content-Length (a peer that streams until it
  // closes) instead of reading until the close. Default: false.
  bool require_content_length = false;
  // When set and it becomes true, Fetch returns Cancelled within ~100 ms.
  const std::atomic<bool>* cancel = nullptr;
  // https: PEM file of the CAs the peer's certificate must chain to; empty
  // = the system's CAs. Default: "".
  std::string ca_file;
};

struct ClientResponse {
  int status = 0;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string_view Header(std::string_view lower_name) const;
};

// Unavailable: connect/read failure or timeout (message names host:port);
// ResourceExhausted: a header past 64 KiB or a body past max_response_bytes;
// Cancelled: `cancel` became true. A 4xx/5xx answer is a successful Fetch
// with that status.
StatusOr<ClientResponse> Fetch(const ClientRequest& request);

}  // namespace kvindex::http
