// The event-loop backend of http::Server: Boost.Beast's HTTP/1.1 parser on
// Boost.Asio, `threads` I/O threads each running its own io_context (no
// cross-thread locking on the hot path; accepted connections are dealt round
// robin), every connection a Session on one of them. No thread ever waits
// for a client, so idle or
// slow clients cost a socket and a few KiB each, not a thread; the total
// deadlines (header, body) and the connection limit bound what they can
// hold. Chosen over civetweb by measurement: docs/benchmarks.md, "HTTP".
#include <strings.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shared/base/strings.h"
#include "shared/http/internal/backend.h"
#include "shared/http/internal/routes.h"
#include "shared/http/internal/target.h"

namespace kvindex::http::internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using strings::Cat;
using Message = bhttp::request<bhttp::string_body>;
using Parser = bhttp::request_parser<bhttp::string_body>;

// Largest request header (request line and fields). Larger -> 431.
constexpr uint32_t kMaxHeaderBytes = 16 * 1024;
// Connections past max_connections still read one request header (so that
// /healthz and /readyz are answered) within this; then 503 or the probe.
constexpr auto kShedHeaderTimeout = std::chrono::milliseconds(1000);
// At most this many connections are in that shed state; past it a
// connection gets a canned 503 and is closed at once.
constexpr uint32_t kMaxShedConnections = 1024;
// After an error response, the rest of what the client sends is read and
// dropped for at most this long / this many bytes, so the client reads the
// response instead of a reset (a "lingering close").
constexpr auto kLingerTimeout = std::chrono::milliseconds(3000);
constexpr size_t kLingerMaxBytes = size_t{64} << 20;
// What a kept-alive connection keeps between requests, at most 16 KiB: the
// read buffer (kFirstRead) and the body string up to kKeepBodyBytes, both
// reused by the next request (no allocation per request in steady state);
// larger ones are released after the request (no per-connection high-water
// marks). The response lives in per-thread scratch (ThreadScratch).
constexpr size_t kKeepBodyBytes = 8 * 1024;
// The first read of a request takes up to this much, so that a typical
// /v1/match (header and ~6.3 KB body) arrives in one read.
constexpr size_t kFirstRead = 8 * 1024;
// Per-thread response scratch larger than this is released after use.
constexpr size_t kKeepScratchBytes = 64 * 1024;
// A failed accept (EMFILE, ENFILE) is retried after this.
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);

constexpr std::string_view kCannedShed =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    "Content-Length: 47\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    "{\"error\": \"too many connections, retry later\"}\n";

std::string_view View(beast::string_view text) { return {text.data(), text.size()}; }

// The response being written, per I/O thread: a response is built and sent
// without the thread switching to another connection (the handler runs,
// then one non-blocking send), so one Response and one header string per
// thread serve every connection. Only what the socket did not take at once
// is copied into the connection (Session::pending_).
struct ThreadScratch {
  Response response;
  std::string head;

  Response& Fresh() {
    response.status = 200;
    response.content_type = "application/json";
    response.body.clear();
    response.headers.clear();
    return response;
  }
  void Trim() {
    if (response.body.capacity() > kKeepScratchBytes) std::string().swap(response.body);
    if (head.capacity() > kKeepScratchBytes) std::string().swap(head);
  }
};

ThreadScratch& Scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

std::string_view LookupHeader(const void* headers, std::string_view name) {
  const auto& message = *static_cast<const Message*>(headers);
  auto it = message.find(beast::string_view(name.data(), name.size()));
  return it == message.end() ? std::string_view() : View(it->value());
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

class EventLoopBackend;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(EventLoopBackend* server, tcp::socket socket, bool shed);
  ~Session();
  void Run() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->ReadIdle(); });
  }

 private:
  void ReadIdle();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnBody(beast::error_code ec);
  void Dispatch();
  // Sends the thread's scratch response (Scratch().response); `close` ends
  // the connection after it (lingering when the client may still be
  // sending). The header and body go out in one non-blocking gather write;
  // only a remainder the socket did not take is copied and written
  // asynchronously.
  void Send(bool close, bool head_only, bool linger);
  void AfterSend(bool close, bool linger);
  void Fail(int status, std::string_view message) {
    SetError(Scratch().Fresh(), status, message);
    Send(true, false, true);
  }
  // Sets the deadline of what the Session waits for next. Cheap: a time
  // stamp; the one timer per Session wakes every tick and compares (a timer
  // re-armed per operation cost ~2x the throughput in syscalls and
  // cancelled handlers).
  void Arm(std::chrono::milliseconds timeout);
  void WaitTick();
  // True when `ec` ended an operation because the deadline passed.
  bool TimedOut(beast::error_code ec) const {
    return timed_out_ && ec == asio::error::operation_aborted;
  }
  void Linger();
  void LingerRead();
  void ReleaseRequest();

  EventLoopBackend* server_;
  const ServerOptions& options_;
  tcp::socket socket_;
  // One deadline for whatever the Session waits for (Arm). Not Beast's
  // tcp_stream: it closes the socket on expiry, and a 408 must still go out.
  asio::steady_timer deadline_;
  std::chrono::steady_clock::time_point deadline_at_;
  bool ticking_ = false;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  const bool shed_;
  Target target_;
  const Route* route_ = nullptr;
  bool head_only_ = false;
  // The request body's storage, moved into each request's parser and back,
  // so its capacity (up to kKeepBodyBytes) is reused.
  std::string body_;
  // "100 Continue", or what the socket did not take of a response's header
  // and body (empty unless a write is waiting for the socket).
  std::string pending_;
  std::string pending_body_;
  size_t lingered_ = 0;
  std::array<char, 4096> discard_;
};

class EventLoopBackend final : public ServerBackend {
 public:
  EventLoopBackend(const ServerOptions& options, const RouteTable& routes)
      : options(options), routes(routes) {}
  ~EventLoopBackend() override { Stop(); }

  Status Start() override;
  void Stop() override;
  uint16_t port() const override { return port_; }

  const ServerOptions& options;
  const RouteTable& routes;
  std::atomic<uint32_t> connections{0};
  std::atomic<uint32_t> shed{0};
  // How often a Session's timer wakes to compare its deadline: a quarter of
  // the shortest timeout, at most 1 s (a deadline fires at most that late).
  std::chrono::milliseconds tick{1000};

 private:
  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);

  std::vector<std::unique_ptr<asio::io_context>> io_;  // one per thread
  size_t next_io_ = 0;  // round robin; only the accepting thread touches it
  std::optional<tcp::acceptor> acceptor_;
  std::optional<asio::steady_timer> retry_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
};

Session::Session(EventLoopBackend* server, tcp::socket socket, bool shed)
    : server_(server),
      options_(server->options),
      socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      shed_(shed) {}

Session::~Session() { (shed_ ? server_->shed : server_->connections).fetch_sub(1); }

void Session::Arm(std::chrono::milliseconds timeout) {
  timed_out_ = false;
  deadline_at_ = std::chrono::steady_clock::now() + timeout;
  if (!ticking_) {
    ticking_ = true;
    WaitTick();
  }
}

void Session::WaitTick() {
  deadline_.expires_at(std::min(deadline_at_, std::chrono::steady_clock::now() + server_->tick));
  // A weak reference: a pending tick must not keep a finished Session (and
  // its connection slot) alive.
  deadline_.async_wait([weak = weak_from_this()](beast::error_code ec) {
    auto self = weak.lock();
    if (ec || self == nullptr) return;
    if (std::chrono::steady_clock::now() < self->deadline_at_) return self->WaitTick();
    self->ticking_ = false;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->socket_.cancel(ignored);
  });
}

void Session::ReadIdle() {
  // The kept body storage goes into the new request (Beast's string_body
  // appends to it).
  body_.clear();
  parser_.emplace(std::piecewise_construct, std::make_tuple(std::move(body_)));
  parser_->header_limit(kMaxHeaderBytes);
  // The body limit is set once the header passed auth and routing (Beast
  // would fail the header read on a large Content-Length first).
  // (boost::none is broken in Boost 1.74: compared as less than any length.)
  parser_->body_limit(std::numeric_limits<uint64_t>::max());
  if (buffer_.size() > 0) return ReadHeader();  // pipelined request
  Arm(shed_ ? kShedHeaderTimeout : std::chrono::milliseconds(options_.idle_timeout_ms));
  socket_.async_read_some(buffer_.prepare(kFirstRead),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            // Idle timeout or the client closed: nothing to answer.
                            if (ec) return;
                            self->buffer_.commit(n);
                            self->ReadHeader();
                          });
}

void Session::ReadHeader() {
  Arm(shed_ ? kShedHeaderTimeout : std::chrono::milliseconds(options_.header_timeout_ms));
  bhttp::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void Session::OnHeader(beast::error_code ec) {
  if (TimedOut(ec)) {
    return Fail(408, Cat("request header not complete within ",
                         shed_ ? kShedHeaderTimeout.count() : options_.header_timeout_ms, " ms"));
  }
  if (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
      ec == asio::error::connection_reset) {
    return;
  }
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    return Fail(431, Cat("request header larger than ", kMaxHeaderBytes, " bytes"));
  }
  if (ec == bhttp::error::bad_content_length) {
    return Fail(400, "invalid or conflicting Content-Length headers");
  }
  if (ec == bhttp::error::bad_transfer_encoding) {
    return Fail(400, "invalid Transfer-Encoding, or Transfer-Encoding with Content-Length");
  }
  if (ec) return Fail(400, Cat("malformed request: ", ec.message()));

  const Message& message = parser_->get();
  std::string error;
  if (!ParseTarget(View(message.target()), &target_, &error)) return Fail(400, error);
  // Framing the parser may have resolved one way and a proxy another
  // (request smuggling): refuse rather than guess.
  const auto lengths = message.equal_range(bhttp::field::content_length);
  for (auto it = lengths.first; it != lengths.second; ++it) {
    if (it->value() != lengths.first->value())
      return Fail(400, "conflicting Content-Length headers");
  }
  const bool has_length = lengths.first != lengths.second;
  if (message.count(bhttp::field::transfer_encoding) > 0) {
    if (has_length) return Fail(400, "Content-Length together with Transfer-Encoding");
    if (!parser_->chunked()) return Fail(400, "a request Transfer-Encoding must end in chunked");
  }

  const std::string_view method = View(message.method_string());
  Response& response = Scratch().Fresh();
  if (shed_) {
    // Over the connection limit: only the open probes are served.
    const PathRoutes* path = server_->routes.Find(target_.path);
    if (path == nullptr || !path->open || (method != "GET" && method != "HEAD")) {
      SetError(response, 503, "too many connections, retry later");
      response.headers.emplace_back("Retry-After", "1");
      return Send(true, false, true);
    }
  }
  const RouteDecision decision =
      Decide(server_->routes, options_.bearer_token, method, target_.path,
             LookupHeader(&message, "Authorization"), response);
  const auto length = parser_->content_length();  // boost::optional
  const bool has_body = (length.has_value() && *length > 0) || parser_->chunked();
  if (decision.route == nullptr) {
    // A body we will not read: close after the response.
    return Send(has_body || !message.keep_alive() || shed_, false, has_body);
  }
  route_ = decision.route;
  head_only_ = decision.head_only;
  if (length.has_value() && *length > options_.max_body_bytes) {
    return Fail(413, Cat("request body of ", *length, " bytes exceeds the limit of ",
                         options_.max_body_bytes, " bytes"));
  }
  const std::string_view expect = LookupHeader(&message, "Expect");
  if (!expect.empty()) {
    if (!EqualsNoCase(expect, "100-continue")) {
      return Fail(417, Cat("unsupported Expect: ", expect));
    }
    if (has_body) {
      // The limits passed: ask for the body.
      pending_ = "HTTP/1.1 100 Continue\r\n\r\n";
      Arm(std::chrono::milliseconds(options_.body_timeout_ms));
      asio::async_write(socket_, asio::buffer(pending_),
                        [self = shared_from_this()](beast::error_code ec, size_t) {
                          if (!ec) self->ReadBody();
                        });
      return;
    }
  }
  if (!has_body) return Dispatch();
  ReadBody();
}

// GCC 12 at -O2 with ASan reports boost::optional's storage inside
// content_length() as maybe uninitialized (a false positive: has_value()
// guards the read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
void Session::ReadBody() {
  parser_->body_limit(options_.max_body_bytes);
  if (const auto length = parser_->content_length(); length.has_value()) {
    // One allocation with room for the padding Dispatch appends.
    parser_->get().body().reserve(*length + kBodyPadding);
  }
  Arm(std::chrono::milliseconds(options_.body_timeout_ms));
  bhttp::async_read(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void Session::OnBody(beast::error_code ec) {
  if (TimedOut(ec)) {
    return Fail(408, Cat("request body not complete within ", options_.body_timeout_ms, " ms"));
  }
  if (ec == bhttp::error::body_limit) {
    return Fail(413, Cat("request body exceeds the limit of ", options_.max_body_bytes, " bytes"));
  }
  if (ec == bhttp::error::partial_message || ec == asio::error::eof ||
      ec == asio::error::connection_reset) {
    return;  // the client went away mid-body
  }
  if (ec) return Fail(400, Cat("malformed request body: ", ec.message()));
  Dispatch();
}

void Session::Dispatch() {
  Message& message = parser_->get();
  std::string& body = message.body();
  const size_t size = body.size();
  body.resize(size + kBodyPadding);  // zero bytes for in-place JSON parsing
  Request request;
  request.method = View(message.method_string());
  request.path = target_.path;
  request.query = target_.query;
  request.body = std::string_view(body.data(), size);
  request.internal_headers = &message;
  request.internal_lookup = &LookupHeader;
  Response& response = Scratch().Fresh();
  try {
    route_->handler(request, response);
  } catch (const std::exception& e) {
    SetError(response, 500, Cat("handler failed: ", e.what()));
  }
  Send(!message.keep_alive() || shed_, head_only_, false);
}

void Session::Send(bool close, bool head_only, bool linger) {
  ThreadScratch& scratch = Scratch();
  scratch.head.clear();
  AppendResponseHead(scratch.response, close, &scratch.head);
  const std::string_view body = head_only ? std::string_view() : scratch.response.body;
  std::array<asio::const_buffer, 2> buffers{asio::buffer(scratch.head),
                                            asio::buffer(body.data(), body.size())};
  // One non-blocking sendmsg; a kept-alive client has read the previous
  // response, so the socket's send buffer nearly always takes it whole.
  beast::error_code ec;
  size_t sent = socket_.write_some(buffers, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ec = {};
    sent = 0;
  }
  if (ec) {
    scratch.Trim();
    return;  // the client went away
  }
  const size_t total = scratch.head.size() + body.size();
  if (sent == total) {
    scratch.Trim();
    return AfterSend(close, linger);
  }
  // The rest waits for the socket in the connection's own buffers: the
  // header's remainder copied, the body moved (a large answer, such as a
  // checkpoint export, is not copied).
  const size_t head_sent = std::min(sent, scratch.head.size());
  pending_.assign(scratch.head, head_sent, std::string::npos);
  const size_t body_sent = sent - head_sent;
  if (head_only) {
    pending_body_.clear();
  } else {
    pending_body_ = std::move(scratch.response.body);
  }
  scratch.Trim();
  std::array<asio::const_buffer, 2> rest{
      asio::buffer(pending_),
      asio::buffer(pending_body_.data() + body_sent, pending_body_.size() - body_sent)};
  Arm(std::chrono::milliseconds(options_.body_timeout_ms));
  asio::async_write(socket_, rest,
                    [self = shared_from_this(), close, linger](beast::error_code ec, size_t) {
                      if (ec) return;
                      std::string().swap(self->pending_);
                      std::string().swap(self->pending_body_);
                      self->AfterSend(close, linger);
                    });
}

void Session::AfterSend(bool close, bool linger) {
  if (!close) {
    ReleaseRequest();
    return ReadIdle();
  }
  if (linger) return Linger();
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
}

void Session::Linger() {
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  ReleaseRequest();
  Arm(kLingerTimeout);
  LingerRead();
}

void Session::LingerRead() {
  // Ends at the client's FIN, the deadline or the byte cap; the Session and
  // its socket go with the last handler.
  socket_.async_read_some(asio::buffer(discard_),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->lingered_ += n;
                            if (!ec && self->lingered_ < kLingerMaxBytes) self->LingerRead();
                          });
}

void Session::ReleaseRequest() {
  if (parser_.has_value()) {
    // The body's storage stays for the next request when it is small.
    std::string& body = parser_->get().body();
    if (body.capacity() <= kKeepBodyBytes) body_ = std::move(body);
    parser_.reset();
  }
  route_ = nullptr;
  if (body_.capacity() > kKeepBodyBytes) std::string().swap(body_);
  if (pending_.capacity() > 0) std::string().swap(pending_);
  if (pending_body_.capacity() > 0) std::string().swap(pending_body_);
  if (buffer_.size() == 0 && buffer_.capacity() > kFirstRead) buffer_.shrink_to_fit();
}

Status EventLoopBackend::Start() {
  if (!io_.empty()) return absl::OkStatus();
  const std::string& listen = options.listen;
  const size_t colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const auto port = static_cast<uint16_t>(std::stoul(listen.substr(colon + 1)));
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(Cat("http: bad listen address '", listen, "'"));

  tick = std::clamp(std::min({std::chrono::milliseconds(options.idle_timeout_ms),
                              std::chrono::milliseconds(options.header_timeout_ms),
                              std::chrono::milliseconds(options.body_timeout_ms),
                              kShedHeaderTimeout, kLingerTimeout}) /
                        4,
                    std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
  for (uint32_t i = 0; i < options.threads; ++i) {
    io_.push_back(std::make_unique<asio::io_context>(1));
  }
  acceptor_.emplace(*io_[0]);
  const tcp::endpoint endpoint(address, port);
  auto fail = [&](std::string_view step) {
    const Status status = absl::UnavailableError(
        Cat("http: cannot listen on ", listen, ": ", step, ": ", ec.message()));
    acceptor_.reset();
    io_.clear();
    return status;
  };
  if (acceptor_->open(endpoint.protocol(), ec)) return fail("open");
  if (acceptor_->set_option(asio::socket_base::reuse_address(true), ec)) return fail("option");
  if (acceptor_->bind(endpoint, ec)) return fail("bind");
  if (acceptor_->listen(4096, ec)) return fail("listen");
  port_ = acceptor_->local_endpoint().port();
  retry_.emplace(*io_[0]);
  Accept();
  for (auto& io : io_) {
    threads_.emplace_back([context = io.get()] {
      // Kept running while idle; Stop() ends it.
      auto guard = asio::make_work_guard(*context);
      context->run();
    });
  }
  return absl::OkStatus();
}

void EventLoopBackend::Accept() {
  acceptor_->async_accept(
      io_[next_io_++ % io_.size()]->get_executor(),
      [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

void EventLoopBackend::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
  if (ec) {
    // Out of descriptors or similar: back off instead of spinning.
    retry_->expires_after(kAcceptRetry);
    retry_->async_wait([this](beast::error_code wait) {
      if (!wait) Accept();
    });
    return;
  }
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // Session::Send writes at once and must not block the thread.
  socket.non_blocking(true, ignored);
  if (connections.fetch_add(1) < options.max_connections) {
    std::make_shared<Session>(this, std::move(socket), false)->Run();
  } else {
    connections.fetch_sub(1);
    if (shed.fetch_add(1) < kMaxShedConnections) {
      std::make_shared<Session>(this, std::move(socket), true)->Run();
    } else {
      shed.fetch_sub(1);
      // Far past the limit: a canned answer into the fresh socket's send
      // buffer (it fits; never blocks), then close.
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(kCannedShed.data(), kCannedShed.size()), ignored);
      socket.shutdown(tcp::socket::shutdown_send, ignored);
      socket.close(ignored);
    }
  }
  Accept();
}

void EventLoopBackend::Stop() {
  if (io_.empty()) return;
  for (auto& io : io_) io->stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  retry_.reset();
  acceptor_.reset();
  // Destroying the context destroys the pending handlers, hence the
  // Sessions and their sockets.
  io_.clear();
  port_ = 0;
}

}  // namespace

std::unique_ptr<ServerBackend> MakeEventLoopBackend(const ServerOptions& options,
                                                    const RouteTable& routes) {
  return std::make_unique<EventLoopBackend>(options, routes);
}

}  // namespace kvindex::http::internal
