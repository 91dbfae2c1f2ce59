// Plain-socket implementation of the blocking HTTP client.
#include "shared/http/client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "shared/base/strings.h"
#include "shared/http/internal/tls_client.h"

namespace kvindex::http {
namespace {

using strings::Cat;
using strings::IStartsWith;
using strings::Trim;
using Clock = std::chrono::steady_clock;

// Largest response header read.
constexpr size_t kMaxResponseHeaderBytes = 64 * 1024;
// A wait is cut into slices this long so that a cancel is seen.
constexpr int kCancelCheckMs = 100;

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// poll() on one descriptor until ready, the deadline or the cancel: 1
// ready, 0 timed out, -2 cancelled, -1 error.
int PollOne(int fd, short events, Clock::time_point deadline, const std::atomic<bool>* cancel) {
  while (true) {
    if (cancel != nullptr && cancel->load()) return -2;
    const int left = RemainingMs(deadline);
    if (left == 0) return 0;
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, std::min(left, kCancelCheckMs));
    if (ready != 0) return ready < 0 && errno == EINTR ? 0 : ready;
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

template <typename F>
void ForEachLine(std::string_view text, F&& f) {
  while (!text.empty()) {
    const size_t eol = text.find("\r\n");
    f(text.substr(0, eol));
    if (eol == std::string_view::npos) break;
    text.remove_prefix(eol + 2);
  }
}

// Chunked transfer decoding; false when malformed.
bool Dechunk(std::string_view in, std::string* out) {
  out->clear();
  while (true) {
    const size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return false;
    std::string_view size_text = in.substr(0, eol);
    const size_t semi = size_text.find(';');
    if (semi != std::string_view::npos) size_text = size_text.substr(0, semi);
    uint64_t size = 0;
    if (!strings::ParseUnsigned(Trim(size_text), &size, 16)) return false;
    in.remove_prefix(eol + 2);
    if (size == 0) return true;
    if (in.size() < size + 2) return false;
    out->append(in.substr(0, size));
    in.remove_prefix(size + 2);
  }
}

}  // namespace

std::string_view ClientResponse::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

StatusOr<Url> ParseUrl(std::string_view text) {
  Url url;
  std::string_view rest = Trim(text);
  if (IStartsWith(rest, "https://")) {
    rest.remove_prefix(8);
    url.tls = true;
    url.port = 443;
  } else if (IStartsWith(rest, "http://")) {
    rest.remove_prefix(7);
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view path = rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    url.base_path = std::string(path);
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(Cat("url '", text, "': unterminated IPv6 host"));
    }
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return absl::InvalidArgumentError(Cat("url '", text, "': bad authority"));
      }
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (url.host.empty()) url.host = "127.0.0.1";
  if (!port_text.empty()) {
    uint32_t port = 0;
    if (!strings::ParseUnsigned(port_text, &port) || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(Cat("url '", text, "': bad port '", port_text, "'"));
    }
    url.port = static_cast<uint16_t>(port);
  }
  return url;
}

StatusOr<ClientResponse> Fetch(const ClientRequest& request) {
  const auto deadline = Clock::now() + request.timeout;
  const std::string where = Cat(request.url.host, ":", request.url.port);

  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(request.url.port);
  if (int rc = getaddrinfo(request.url.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(Cat("http: cannot resolve ", where, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      ::close(fd);
      fd = -1;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (PollOne(fd, POLLOUT, deadline, request.cancel) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      last_error = err != 0 ? std::strerror(err) : "connect timed out";
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (request.cancel != nullptr && request.cancel->load()) {
    if (fd >= 0) ::close(fd);
    return absl::CancelledError(Cat("http: request to ", where, " cancelled"));
  }
  if (fd < 0)
    return absl::UnavailableError(Cat("http: cannot connect to ", where, ": ", last_error));
  Fd socket(fd);
  std::unique_ptr<internal::TlsClient> tls;
  if (request.url.tls) {
    KVINDEX_ASSIGN_OR_RETURN(
        tls, internal::TlsClient::Connect(fd, request.url.host, request.ca_file, [&](bool write) {
          return PollOne(fd, write ? POLLOUT : POLLIN, deadline, request.cancel);
        }));
  }
  // One send or receive; -2: would block (*want_write: which way to wait).
  std::string io_error;
  auto send_some = [&](const char* data, size_t size, bool* want_write) -> ssize_t {
    if (tls) return tls->Write(data, size, want_write, &io_error);
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      *want_write = true;
      return -2;
    }
    if (n < 0) io_error = std::strerror(errno);
    return n;
  };
  auto recv_some = [&](char* data, size_t size, bool* want_write) -> ssize_t {
    if (tls) return tls->Read(data, size, want_write, &io_error);
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      *want_write = false;
      return -2;
    }
    if (n < 0) io_error = std::strerror(errno);
    return n;
  };

  std::string out =
      Cat(request.method, " ", request.url.base_path, request.path.empty() ? "/" : request.path,
          " HTTP/1.1\r\nHost: ", where, "\r\nConnection: close\r\nAccept: */*\r\n");
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT") {
    strings::Append(&out, "Content-Type: ", request.content_type,
                    "\r\nContent-Length: ", request.body.size(), "\r\n");
  }
  for (const auto& [name, value] : request.headers)
    strings::Append(&out, name, ": ", value, "\r\n");
  out.append("\r\n");
  out.append(request.body);

  size_t sent = 0;
  while (sent < out.size()) {
    bool want_write = true;
    const ssize_t n = send_some(out.data() + sent, out.size() - sent, &want_write);
    if (n == -2) {
      const int ready = PollOne(fd, want_write ? POLLOUT : POLLIN, deadline, request.cancel);
      if (ready == -2) return absl::CancelledError(Cat("http: request to ", where, " cancelled"));
      if (ready != 1) return absl::UnavailableError(Cat("http: timed out sending to ", where));
      continue;
    }
    // The server may answer (413) and close before reading everything.
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }

  std::string in;
  char buffer[16384];
  size_t header_end = std::string::npos;
  uint64_t content_length = UINT64_MAX;
  while (true) {
    if (header_end != std::string::npos && content_length != UINT64_MAX &&
        in.size() >= header_end + 4 + content_length) {
      break;
    }
    bool want_write = false;
    const ssize_t n = recv_some(buffer, sizeof(buffer), &want_write);
    if (n == -2) {
      const int ready = PollOne(fd, want_write ? POLLOUT : POLLIN, deadline, request.cancel);
      if (ready == -2) return absl::CancelledError(Cat("http: request to ", where, " cancelled"));
      if (ready != 1) return absl::UnavailableError(Cat("http: timed out reading from ", where));
      continue;
    }
    if (n < 0) {
      if (header_end != std::string::npos) break;
      return absl::UnavailableError(Cat("http: read from ", where, ": ", io_error));
    }
    if (n == 0) break;
    in.append(buffer, static_cast<size_t>(n));
    if (header_end == std::string::npos) {
      header_end = in.find("\r\n\r\n");
      if (header_end == std::string::npos && in.size() > kMaxResponseHeaderBytes) {
        return absl::ResourceExhaustedError(Cat("http: response header from ", where,
                                                " larger than ", kMaxResponseHeaderBytes,
                                                " bytes"));
      }
      if (header_end != std::string::npos) {
        // Find Content-Length early so we do not wait for the close.
        std::string_view head(in.data(), header_end);
        ForEachLine(head, [&](std::string_view line) {
          if (IStartsWith(line, "content-length:")) {
            uint64_t v = 0;
            if (strings::ParseUnsigned(Trim(line.substr(15)), &v)) content_length = v;
          }
        });
        if (content_length == UINT64_MAX && request.require_content_length) {
          return absl::FailedPreconditionError(
              Cat("http: response from ", where, " has no Content-Length"));
        }
        if (content_length != UINT64_MAX && content_length > request.max_response_bytes) {
          return absl::ResourceExhaustedError(Cat("http: response from ", where, " of ",
                                                  content_length, " bytes exceeds the limit of ",
                                                  request.max_response_bytes, " bytes"));
        }
      }
    }
    if (header_end != std::string::npos &&
        in.size() - header_end - 4 > request.max_response_bytes) {
      return absl::ResourceExhaustedError(Cat("http: response from ", where,
                                              " exceeds the limit of ", request.max_response_bytes,
                                              " bytes"));
    }
  }
  if (header_end == std::string::npos) {
    return absl::UnavailableError(Cat("http: incomplete response from ", where));
  }
  ClientResponse response;
  std::string_view head(in.data(), header_end);
  bool first = true;
  bool chunked = false;
  std::vector<std::string_view> lines;
  ForEachLine(head, [&](std::string_view line) { lines.push_back(line); });
  for (std::string_view line : lines) {
    if (first) {
      first = false;
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos ||
          !strings::ParseUnsigned(line.substr(sp + 1, 3), &response.status)) {
        return absl::UnavailableError(Cat("http: bad status line from ", where));
      }
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = strings::ToLower(line.substr(0, colon));
    std::string value(Trim(line.substr(colon + 1)));
    if (name == "transfer-encoding" && strings::ToLower(value).find("chunked") != std::string::npos)
      chunked = true;
    response.headers.emplace_back(std::move(name), std::move(value));
  }
  std::string_view body(in.data() + header_end + 4, in.size() - header_end - 4);
  if (content_length != UINT64_MAX && body.size() > content_length)
    body = body.substr(0, content_length);
  if (chunked) {
    if (!Dechunk(body, &response.body)) {
      return absl::UnavailableError(Cat("http: bad chunked body from ", where));
    }
  } else {
    response.body = std::string(body);
  }
  return response;
}

}  // namespace kvindex::http
