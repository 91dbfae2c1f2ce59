#include "shared/http/internal/tls_client.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "shared/base/strings.h"

namespace kvindex::http::internal {
namespace {

std::string LastSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown TLS error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char address[16];
  return inet_pton(AF_INET, host.c_str(), address) == 1 ||
         inet_pton(AF_INET6, host.c_str(), address) == 1;
}

}  // namespace

struct TlsClient::Impl {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Impl() {
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
  }
  // -2 with *want_write, or -1 with *error, for a failed SSL call.
  ssize_t Failed(int rc, bool* want_write, std::string* error) {
    const int code = SSL_get_error(ssl, rc);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) {
      *want_write = code == SSL_ERROR_WANT_WRITE;
      return -2;
    }
    if (code == SSL_ERROR_ZERO_RETURN) return 0;
    *error = LastSslError();
    return -1;
  }
};

TlsClient::TlsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsClient::~TlsClient() = default;

StatusOr<std::unique_ptr<TlsClient>> TlsClient::Connect(int fd, const std::string& host,
                                                        const std::string& ca_file,
                                                        const Wait& wait) {
  auto impl = std::make_unique<Impl>();
  auto fail = [&](std::string_view what) {
    return absl::UnavailableError(strings::Cat("https: ", what, " (", host, "): ", LastSslError()));
  };
  impl->ctx = SSL_CTX_new(TLS_client_method());
  if (impl->ctx == nullptr) return fail("cannot create a TLS context");
  SSL_CTX_set_min_proto_version(impl->ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(impl->ctx, SSL_VERIFY_PEER, nullptr);
  const int loaded = ca_file.empty()
                         ? SSL_CTX_set_default_verify_paths(impl->ctx)
                         : SSL_CTX_load_verify_locations(impl->ctx, ca_file.c_str(), nullptr);
  if (loaded != 1) return fail(strings::Cat("cannot load the CA file '", ca_file, "'"));
  impl->ssl = SSL_new(impl->ctx);
  if (impl->ssl == nullptr || SSL_set_fd(impl->ssl, fd) != 1)
    return fail("cannot create a session");
  // The certificate must name the host (DNS name or IP address).
  X509_VERIFY_PARAM* param = SSL_get0_param(impl->ssl);
  if (IsIpLiteral(host)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) return fail("bad IP address");
  } else {
    SSL_set_tlsext_host_name(impl->ssl, host.c_str());
    if (SSL_set1_host(impl->ssl, host.c_str()) != 1) return fail("bad host name");
  }
  while (true) {
    const int rc = SSL_connect(impl->ssl);
    if (rc == 1) break;
    const int code = SSL_get_error(impl->ssl, rc);
    if (code != SSL_ERROR_WANT_READ && code != SSL_ERROR_WANT_WRITE) {
      const long verify = SSL_get_verify_result(impl->ssl);
      if (verify != X509_V_OK) {
        ERR_clear_error();
        return absl::UnavailableError(
            strings::Cat("https: certificate of ", host,
                         " not accepted: ", X509_verify_cert_error_string(verify)));
      }
      return fail("handshake failed");
    }
    const int ready = wait(code == SSL_ERROR_WANT_WRITE);
    if (ready == -2)
      return absl::CancelledError(strings::Cat("https: handshake with ", host, " cancelled"));
    if (ready != 1)
      return absl::UnavailableError(strings::Cat("https: handshake with ", host, " timed out"));
  }
  return std::unique_ptr<TlsClient>(new TlsClient(std::move(impl)));
}

ssize_t TlsClient::Write(const char* data, size_t size, bool* want_write, std::string* error) {
  const int rc = SSL_write(impl_->ssl, data, static_cast<int>(std::min<size_t>(size, 1 << 20)));
  return rc > 0 ? rc : impl_->Failed(rc, want_write, error);
}

ssize_t TlsClient::Read(char* data, size_t size, bool* want_write, std::string* error) {
  const int rc = SSL_read(impl_->ssl, data, static_cast<int>(std::min<size_t>(size, 1 << 20)));
  return rc > 0 ? rc : impl_->Failed(rc, want_write, error);
}

}  // namespace kvindex::http::internal
