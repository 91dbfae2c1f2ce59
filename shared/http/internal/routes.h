// The route table and the request-independent decisions both server
// backends share: which route a (method, path) names, whether a request is
// authenticated, and how a Response is written on the wire. Internal to
// shared/http (server.h is the public interface).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/http/server.h"

namespace kvindex::http::internal {

struct Route {
  Handler handler;
  RouteOptions options;
};

struct PathRoutes {
  std::string path;
  std::vector<std::pair<std::string, Route>> by_method;  // sorted by method
  std::string allow;                                     // "GET, HEAD, POST"
  // Every method on the path is open (served without the token).
  bool open = false;
};

// Immutable while a server runs; a handful of entries, so a linear scan
// beats hashing.
class RouteTable {
 public:
  void Add(std::string_view method, std::string_view path, Handler handler, RouteOptions options);
  const PathRoutes* Find(std::string_view path) const;

 private:
  std::vector<PathRoutes> routes_;
};

// What routing decided for one request.
struct RouteDecision {
  const Route* route = nullptr;  // null: `response` holds the error
  // HEAD served by the GET route: send the headers only.
  bool head_only = false;
};

// Authentication first (so an unauthenticated client learns nothing about
// which paths exist beyond the open ones), then the route by path and method.
// `authorization` is the request's Authorization header.
RouteDecision Decide(const RouteTable& routes, const std::string& bearer_token,
                     std::string_view method, std::string_view path, std::string_view authorization,
                     Response& response);

std::string_view StatusText(int status);

// Appends the status line, headers and (unless head_only) body of `response`.
// `close` adds "Connection: close".
void AppendResponse(const Response& response, bool close, bool head_only, std::string* out);
// The same without the body (the event loop sends the body from where the
// handler wrote it).
void AppendResponseHead(const Response& response, bool close, std::string* out);

}  // namespace kvindex::http::internal
