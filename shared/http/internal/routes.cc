#include "shared/http/internal/routes.h"

#include <strings.h>

#include <algorithm>

#include "shared/base/strings.h"

namespace kvindex::http::internal {
namespace {

using strings::Cat;

// Constant-time comparison so the token cannot be guessed byte by byte.
bool TokenEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool Authorized(const std::string& token, std::string_view authorization) {
  constexpr std::string_view kBearer = "Bearer ";
  return authorization.size() > kBearer.size() &&
         strncasecmp(authorization.data(), kBearer.data(), kBearer.size()) == 0 &&
         TokenEquals(strings::Trim(authorization.substr(kBearer.size())), token);
}

}  // namespace

void RouteTable::Add(std::string_view method, std::string_view path, Handler handler,
                     RouteOptions options) {
  auto* entry = const_cast<PathRoutes*>(Find(path));
  if (entry == nullptr) {
    routes_.push_back(PathRoutes{std::string(path), {}, {}, false});
    entry = &routes_.back();
  }
  auto& methods = entry->by_method;
  auto it = std::find_if(methods.begin(), methods.end(),
                         [&](const auto& m) { return m.first == method; });
  if (it != methods.end()) {
    it->second = Route{std::move(handler), options};
  } else {
    methods.emplace_back(std::string(method), Route{std::move(handler), options});
    std::sort(methods.begin(), methods.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  std::vector<std::string> allowed;
  entry->open = true;
  for (const auto& [m, route] : methods) {
    allowed.push_back(m);
    entry->open = entry->open && route.options.open;
  }
  // HEAD is served wherever GET is.
  if (std::find(allowed.begin(), allowed.end(), "GET") != allowed.end() &&
      std::find(allowed.begin(), allowed.end(), "HEAD") == allowed.end()) {
    allowed.push_back("HEAD");
    std::sort(allowed.begin(), allowed.end());
  }
  entry->allow.clear();
  for (const std::string& m : allowed) {
    if (!entry->allow.empty()) entry->allow.append(", ");
    entry->allow.append(m);
  }
}

const PathRoutes* RouteTable::Find(std::string_view path) const {
  for (const PathRoutes& entry : routes_) {
    if (entry.path == path) return &entry;
  }
  return nullptr;
}

RouteDecision Decide(const RouteTable& routes, const std::string& bearer_token,
                     std::string_view method, std::string_view path, std::string_view authorization,
                     Response& response) {
  RouteDecision decision;
  const PathRoutes* path_routes = routes.Find(path);
  const bool open = path_routes != nullptr && path_routes->open;
  if (!bearer_token.empty() && !open && !Authorized(bearer_token, authorization)) {
    SetError(response, 401, "missing or wrong bearer token (Authorization: Bearer <token>)");
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
    return decision;
  }
  if (path_routes == nullptr) {
    SetError(response, 404, Cat("no such endpoint: ", path));
    return decision;
  }
  const Route* get = nullptr;
  for (const auto& [m, route] : path_routes->by_method) {
    if (m == method) {
      decision.route = &route;
      return decision;
    }
    if (m == "GET") get = &route;
  }
  if (method == "HEAD" && get != nullptr) {
    decision.route = get;
    decision.head_only = true;
    return decision;
  }
  SetError(
      response, 405,
      Cat("method ", method, " not allowed on ", path, " (allowed: ", path_routes->allow, ")"));
  response.headers.emplace_back("Allow", path_routes->allow);
  return decision;
}

std::string_view StatusText(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

void AppendResponseHead(const Response& response, bool close, std::string* out) {
  strings::Append(out, "HTTP/1.1 ", response.status, " ", StatusText(response.status),
                  "\r\nContent-Type: ", response.content_type,
                  "\r\nContent-Length: ", response.body.size(), "\r\n");
  for (const auto& [name, value] : response.headers)
    strings::Append(out, name, ": ", value, "\r\n");
  if (close) out->append("Connection: close\r\n");
  out->append("\r\n");
}

void AppendResponse(const Response& response, bool close, bool head_only, std::string* out) {
  AppendResponseHead(response, close, out);
  if (!head_only) out->append(response.body);
}

}  // namespace kvindex::http::internal
