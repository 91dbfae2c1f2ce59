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
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <exception>
#include <functional>
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
// The most a connection's read buffer holds of what the parser has not
// consumed: a whole header, a chunk-size line with its extensions, the
// trailer section. Past it the request is refused (431), so none of them
// can grow the connection's memory (Beast keeps an incomplete chunk line or
// trailer section in the buffer until it is whole).
constexpr size_t kMaxBufferedBytes = kMaxHeaderBytes;
// Longest chunk extension (";name=value..." after a chunk size) accepted;
// longer -> 400. Nothing here uses them.
constexpr size_t kMaxChunkExtensionBytes = 256;
// Under pressure (connections at 3/4 of max_connections) a request header
// must arrive within this (or header_timeout_ms if shorter).
constexpr auto kPressureHeaderTimeout = std::chrono::milliseconds(2000);
// A connection at max_connections is still admitted when an idle
// kept-alive connection is being closed for it; at most this many over the
// limit while those closes are under way.
constexpr uint32_t kMaxOverLimit = 64;
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

// Checks the raw request header (request line to the empty line, CRLFs
// included) for what Beast would accept but HTTP/1.1 forbids or leaves
// ambiguous: obs-fold (a line starting with SP or HTAB, RFC 9112 5.2) and a
// bare LF. Empty when fine, else the error.
std::string_view CheckRawHeader(std::string_view head) {
  for (size_t i = head.find('\n'); i != std::string_view::npos; i = head.find('\n', i + 1)) {
    if (i == 0 || head[i - 1] != '\r') return "bare LF in the request header";
    if (i + 1 < head.size() && (head[i + 1] == ' ' || head[i + 1] == '\t')) {
      return "obsolete line folding (obs-fold) in the request header";
    }
  }
  return {};
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
class Session;

// One I/O thread: its io_context and its idle kept-alive connections, oldest
// first (an intrusive list only that thread touches), the ones closed first
// when a new connection arrives at the limit.
struct IoThread {
  Session* idle_head = nullptr;
  Session* idle_tail = nullptr;
  std::atomic<uint32_t> idle_count{0};
  // Last, so that it goes first: its pending handlers own the Sessions,
  // which unlink themselves from the list above.
  asio::io_context io{1};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `client_bucket`: the client address's slot in
  // EventLoopBackend::busy_by_client.
  Session(EventLoopBackend* server, IoThread* thread, tcp::socket socket, bool shed,
          uint32_t client_bucket);
  ~Session();
  void Run() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->ReadIdle(); });
  }
  // Closes the connection if it is still idle (on its I/O thread).
  void Evict();

 private:
  friend class EventLoopBackend;
  void EnterIdle();
  void LeaveIdle();
  void ReadIdle();
  void ReadHeader();
  // Reads until the whole header is in buffer_, checks it raw, then parses it.
  void ReadHeaderMore();
  void ParseHeader();
  void OnHeader(beast::error_code ec);
  // Charges `bytes` of body memory against max_body_total_bytes; false (and
  // nothing charged) past it.
  bool Charge(uint64_t bytes);
  void Uncharge();
  void RunOffloaded();
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
  // 503 + Retry-After: 1 for a budget that is exhausted now.
  void Busy(std::string_view message, bool close) {
    Response& response = Scratch().Fresh();
    SetError(response, 503, message);
    response.headers.emplace_back("Retry-After", "1");
    Send(close, false, close);
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
  IoThread* thread_;
  const ServerOptions& options_;
  tcp::socket socket_;
  const uint32_t client_bucket_;
  // This request counts against its client's max_connections_per_client.
  bool busy_ = false;
  // It was past that limit: treated like a shed connection.
  bool over_client_ = false;
  bool Limited() const { return shed_ || over_client_; }
  // In thread_'s idle list.
  bool idle_ = false;
  Session* idle_prev_ = nullptr;
  Session* idle_next_ = nullptr;
  // Body bytes charged against max_body_total_bytes for this request.
  uint64_t charged_ = 0;
  // Why the body read stopped, when the parser only says body_limit or
  // bad_chunk_extension.
  bool over_budget_ = false;
  // This request holds the server's one offload slot.
  bool offloading_ = false;
  // The offloaded handler's response, handed back to the I/O thread.
  Response offloaded_;
  // The parser's chunk-header callback (Beast keeps a reference to it).
  std::function<void(uint64_t, beast::string_view, beast::error_code&)> on_chunk_;
  // One deadline for whatever the Session waits for (Arm). Not Beast's
  // tcp_stream: it closes the socket on expiry, and a 408 must still go out.
  asio::steady_timer deadline_;
  std::chrono::steady_clock::time_point deadline_at_;
  bool ticking_ = false;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  const bool shed_;
  std::chrono::milliseconds header_timeout_{0};
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
  // Body bytes held by all requests (Session::Charge).
  std::atomic<uint64_t> body_bytes{0};
  // An offloaded handler is running or its response is being sent.
  std::atomic<bool> offload_busy{false};
  // Evictions posted and not yet done.
  std::atomic<uint32_t> evictions_pending{0};
  // connections at or past this: shorter header deadline.
  uint32_t pressure_at = 0;
  uint32_t per_client_limit = 0;
  std::optional<asio::io_context> offload_io;

  // Requests in progress (from their first byte to their response) per
  // client address, hashed into buckets (lock-free; two addresses sharing a
  // bucket share its limit). Idle connections do not count: they are
  // closed at the connection limit instead.
  static constexpr uint32_t kClientBuckets = 4096;
  std::array<std::atomic<uint32_t>, kClientBuckets> busy_by_client{};
  static uint32_t ClientBucket(const asio::ip::address& address) {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    if (address.is_v4()) {
      h ^= address.to_v4().to_uint();
    } else {
      for (unsigned char byte : address.to_v6().to_bytes()) h = (h ^ byte) * 0x100000001b3ULL;
    }
    h *= 0x9e3779b97f4a7c15ULL;
    return static_cast<uint32_t>(h >> 52) % kClientBuckets;
  }
  // How often a Session's timer wakes to compare its deadline: a quarter of
  // the shortest timeout, at most 1 s (a deadline fires at most that late).
  std::chrono::milliseconds tick{1000};

 private:
  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  // Posts the close of the oldest idle connection of the thread with the
  // most; false when no thread has one to spare.
  bool RequestEviction();

  std::vector<std::unique_ptr<IoThread>> io_;  // one per thread
  std::thread offload_thread_;
  size_t next_io_ = 0;  // round robin; only the accepting thread touches it
  std::optional<tcp::acceptor> acceptor_;
  std::optional<asio::steady_timer> retry_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
};

Session::Session(EventLoopBackend* server, IoThread* thread, tcp::socket socket, bool shed,
                 uint32_t client_bucket)
    : server_(server),
      thread_(thread),
      options_(server->options),
      socket_(std::move(socket)),
      client_bucket_(client_bucket),
      deadline_(socket_.get_executor()),
      buffer_(kMaxBufferedBytes),
      shed_(shed) {
  on_chunk_ = [this](uint64_t size, beast::string_view extensions, beast::error_code& ec) {
    if (extensions.size() > kMaxChunkExtensionBytes) {
      ec = bhttp::error::bad_chunk_extension;
    } else if (size > 0 && !Charge(size)) {
      over_budget_ = true;
      ec = bhttp::error::body_limit;
    }
  };
}

Session::~Session() {
  LeaveIdle();
  Uncharge();
  if (offloading_) server_->offload_busy.store(false);
  if (busy_) server_->busy_by_client[client_bucket_].fetch_sub(1, std::memory_order_relaxed);
  (shed_ ? server_->shed : server_->connections).fetch_sub(1);
}

void Session::EnterIdle() {
  if (idle_ || shed_) return;
  idle_ = true;
  idle_prev_ = thread_->idle_tail;
  idle_next_ = nullptr;
  (idle_prev_ != nullptr ? idle_prev_->idle_next_ : thread_->idle_head) = this;
  thread_->idle_tail = this;
  thread_->idle_count.fetch_add(1, std::memory_order_relaxed);
}

void Session::LeaveIdle() {
  if (!idle_) return;
  idle_ = false;
  (idle_prev_ != nullptr ? idle_prev_->idle_next_ : thread_->idle_head) = idle_next_;
  (idle_next_ != nullptr ? idle_next_->idle_prev_ : thread_->idle_tail) = idle_prev_;
  idle_prev_ = idle_next_ = nullptr;
  thread_->idle_count.fetch_sub(1, std::memory_order_relaxed);
}

void Session::Evict() {
  if (!idle_) return;
  LeaveIdle();
  // The pending idle read ends with operation_aborted; the Session goes
  // with its handler.
  beast::error_code ignored;
  socket_.cancel(ignored);
}

bool Session::Charge(uint64_t bytes) {
  const uint64_t before = server_->body_bytes.fetch_add(bytes);
  if (before + bytes > options_.max_body_total_bytes) {
    server_->body_bytes.fetch_sub(bytes);
    return false;
  }
  charged_ += bytes;
  return true;
}

void Session::Uncharge() {
  if (charged_ == 0) return;
  server_->body_bytes.fetch_sub(charged_);
  charged_ = 0;
}

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
  // Every chunk is charged against the body budget when its size line
  // arrives, before its bytes do; extensions are bounded.
  parser_->on_chunk_header(on_chunk_);
  if (buffer_.size() > 0) return ReadHeader();  // pipelined request
  Arm(shed_ ? kShedHeaderTimeout : std::chrono::milliseconds(options_.idle_timeout_ms));
  EnterIdle();
  socket_.async_read_some(buffer_.prepare(kFirstRead),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->LeaveIdle();
                            // Idle timeout, evicted or the client closed:
                            // nothing to answer.
                            if (ec) return;
                            self->buffer_.commit(n);
                            self->ReadHeader();
                          });
}

void Session::ReadHeader() {
  if (!busy_ && !shed_) {
    busy_ = true;
    over_client_ = server_->busy_by_client[client_bucket_].fetch_add(
                       1, std::memory_order_relaxed) >= server_->per_client_limit;
  }
  auto timeout = std::chrono::milliseconds(options_.header_timeout_ms);
  if (Limited()) {
    timeout = kShedHeaderTimeout;
  } else if (server_->connections.load(std::memory_order_relaxed) >= server_->pressure_at) {
    timeout = std::min(timeout, std::chrono::milliseconds(kPressureHeaderTimeout));
  }
  header_timeout_ = timeout;
  Arm(timeout);
  ReadHeaderMore();
}

void Session::ReadHeaderMore() {
  const auto data = buffer_.data();
  const std::string_view held(static_cast<const char*>(data.data()), data.size());
  const size_t end = held.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (std::string_view error = CheckRawHeader(held); !error.empty()) return Fail(400, error);
    if (held.size() >= kMaxHeaderBytes) {
      return Fail(431, Cat("request header larger than ", kMaxHeaderBytes, " bytes"));
    }
    socket_.async_read_some(buffer_.prepare(std::min(kFirstRead, kMaxHeaderBytes - held.size())),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (!ec) {
                                self->buffer_.commit(n);
                                return self->ReadHeaderMore();
                              }
                              self->OnHeader(ec);
                            });
    return;
  }
  if (end + 4 > kMaxHeaderBytes) {
    return Fail(431, Cat("request header larger than ", kMaxHeaderBytes, " bytes"));
  }
  if (std::string_view error = CheckRawHeader(held.substr(0, end + 2)); !error.empty()) {
    return Fail(400, error);
  }
  beast::error_code ec;
  const size_t used = parser_->put(asio::buffer(held.data(), end + 4), ec);
  buffer_.consume(used);
  if (!ec && !parser_->is_header_done()) ec = bhttp::error::partial_message;
  OnHeader(ec);
}

void Session::OnHeader(beast::error_code ec) {
  if (TimedOut(ec)) {
    return Fail(408, Cat("request header not complete within ", header_timeout_.count(), " ms"));
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
  // RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host, and any
  // request at most one; else 400.
  const size_t hosts = message.count(bhttp::field::host);
  if (hosts > 1) return Fail(400, "more than one Host header");
  if (hosts == 0 && message.version() >= 11) return Fail(400, "missing Host header");
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
  if (Limited()) {
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
    return Send(has_body || !message.keep_alive() || Limited(), false, has_body);
  }
  route_ = decision.route;
  head_only_ = decision.head_only;
  if (length.has_value() && *length > options_.max_body_bytes) {
    return Fail(413, Cat("request body of ", *length, " bytes exceeds the limit of ",
                         options_.max_body_bytes, " bytes"));
  }
  if (length.has_value() && *length > 0 && !Charge(*length + kBodyPadding)) {
    return Busy("request bodies in progress exceed the server's memory budget, retry later", true);
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
  if (over_budget_) {
    return Busy("request bodies in progress exceed the server's memory budget, retry later", true);
  }
  if (ec == bhttp::error::body_limit) {
    return Fail(413, Cat("request body exceeds the limit of ", options_.max_body_bytes, " bytes"));
  }
  if (ec == bhttp::error::buffer_overflow) {
    return Fail(
        431, Cat("chunk-size line or trailer section larger than ", kMaxBufferedBytes, " bytes"));
  }
  if (ec == bhttp::error::bad_chunk_extension) {
    return Fail(400, Cat("malformed chunk extension, or one longer than ", kMaxChunkExtensionBytes,
                         " bytes"));
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
  if (route_->options.offload) {
    if (server_->offload_busy.exchange(true)) {
      body.resize(size);
      return Busy("another request of this kind is in progress, retry later",
                  !message.keep_alive() || Limited());
    }
    offloading_ = true;
    // The connection waits (nothing else reads or writes it) while the
    // handler runs on the offload thread; the answer comes back here.
    asio::post(*server_->offload_io, [self = shared_from_this()] { self->RunOffloaded(); });
    return;
  }
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
  Send(!message.keep_alive() || Limited(), head_only_, false);
}

void Session::RunOffloaded() {
  Message& message = parser_->get();
  const std::string& body = message.body();
  Request request;
  request.method = View(message.method_string());
  request.path = target_.path;
  request.query = target_.query;
  request.body = std::string_view(body.data(), body.size() - kBodyPadding);
  request.internal_headers = &message;
  request.internal_lookup = &LookupHeader;
  offloaded_ = Response();
  try {
    route_->handler(request, offloaded_);
  } catch (const std::exception& e) {
    SetError(offloaded_, 500, Cat("handler failed: ", e.what()));
  }
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    Scratch().Fresh() = std::move(self->offloaded_);
    self->offloaded_ = Response();
    self->Send(!self->parser_->get().keep_alive() || self->Limited(), self->head_only_, false);
  });
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
  Uncharge();
  if (busy_) {
    busy_ = false;
    over_client_ = false;
    server_->busy_by_client[client_bucket_].fetch_sub(1, std::memory_order_relaxed);
  }
  over_budget_ = false;
  if (offloading_) {
    offloading_ = false;
    server_->offload_busy.store(false);
  }
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
  for (uint32_t i = 0; i < options.threads; ++i) io_.push_back(std::make_unique<IoThread>());
  pressure_at = std::max<uint32_t>(1, options.max_connections - options.max_connections / 4);
  per_client_limit = options.max_connections_per_client != 0
                         ? options.max_connections_per_client
                         : std::max<uint32_t>(1, options.max_connections / 2);
  acceptor_.emplace(io_[0]->io);
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
  retry_.emplace(io_[0]->io);
  Accept();
  for (auto& io : io_) {
    threads_.emplace_back([context = &io->io] {
      // Kept running while idle; Stop() ends it.
      auto guard = asio::make_work_guard(*context);
      context->run();
    });
  }
  offload_io.emplace(1);
  offload_thread_ = std::thread([context = &*offload_io] {
    auto guard = asio::make_work_guard(*context);
    context->run();
  });
  return absl::OkStatus();
}

void EventLoopBackend::Accept() {
  acceptor_->async_accept(
      io_[next_io_ % io_.size()]->io.get_executor(),
      [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

bool EventLoopBackend::RequestEviction() {
  IoThread* most = nullptr;
  uint32_t idle = 0;
  for (auto& thread : io_) {
    const uint32_t n = thread->idle_count.load(std::memory_order_relaxed);
    idle += n;
    if (most == nullptr || n > most->idle_count.load(std::memory_order_relaxed)) {
      most = thread.get();
    }
  }
  if (idle <= evictions_pending.load() || most->idle_count.load() == 0) return false;
  evictions_pending.fetch_add(1);
  asio::post(most->io, [this, most] {
    if (most->idle_head != nullptr) most->idle_head->Evict();
    evictions_pending.fetch_sub(1);
  });
  return true;
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
  IoThread* thread = io_[next_io_++ % io_.size()].get();
  const tcp::endpoint remote = socket.remote_endpoint(ignored);
  const uint32_t bucket = ignored ? 0 : ClientBucket(remote.address());
  const uint32_t before = connections.fetch_add(1);
  // At the limit, an idle kept-alive connection makes room.
  const bool admitted = before < options.max_connections ||
                        (before < options.max_connections + kMaxOverLimit && RequestEviction());
  if (!admitted) connections.fetch_sub(1);
  if (admitted) {
    std::make_shared<Session>(this, thread, std::move(socket), false, bucket)->Run();
  } else {
    if (shed.fetch_add(1) < kMaxShedConnections) {
      std::make_shared<Session>(this, thread, std::move(socket), true, bucket)->Run();
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
  // A running offloaded handler finishes first; its answer is dropped with
  // the connections.
  offload_io->stop();
  offload_thread_.join();
  for (auto& io : io_) io->io.stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  retry_.reset();
  acceptor_.reset();
  // Destroying the context destroys the pending handlers, hence the
  // Sessions and their sockets.
  io_.clear();
  offload_io.reset();
  port_ = 0;
}

}  // namespace

std::unique_ptr<ServerBackend> MakeEventLoopBackend(const ServerOptions& options,
                                                    const RouteTable& routes) {
  return std::make_unique<EventLoopBackend>(options, routes);
}

}  // namespace kvindex::http::internal
