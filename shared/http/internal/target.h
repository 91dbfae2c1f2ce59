// Parsing of an HTTP/1.1 request target (RFC 9112 section 3.2) into the
// decoded path and the raw query. Strict on purpose: a NUL or control byte,
// raw or percent-encoded, would let the path a handler sees differ from the
// bytes on the wire (civetweb truncated "/v1/match%00x" to "/v1/match").
#pragma once

#include <string>
#include <string_view>

namespace kvindex::http::internal {

struct Target {
  std::string path;        // percent-decoded, starts with '/'
  std::string_view query;  // after '?', raw (points into the input)
};

// Accepts origin-form ("/p?q") and absolute-form ("http://host/p?q", whose
// authority is ignored: the server answers for whatever host it is reached
// by). Returns false with `error` set for anything else: other forms, bytes
// outside visible ASCII, a malformed or control-byte percent escape.
bool ParseTarget(std::string_view raw, Target* target, std::string* error);

}  // namespace kvindex::http::internal
