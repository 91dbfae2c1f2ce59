#include "shared/epp/tls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>

namespace kvindex::epp {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM data";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

}  // namespace

Status CheckKeyCertPair(const std::string& cert_path, const std::string& key_path) {
  std::unique_ptr<FILE, FileCloser> cert_file(std::fopen(cert_path.c_str(), "rb"));
  if (!cert_file) return absl::NotFoundError("--epp-tls-cert: cannot read '" + cert_path + "'");
  std::unique_ptr<X509, X509Free> cert(PEM_read_X509(cert_file.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return absl::InvalidArgumentError("--epp-tls-cert: '" + cert_path +
                                      "' is not a PEM certificate (" + OpenSslError() + ")");
  }
  std::unique_ptr<FILE, FileCloser> key_file(std::fopen(key_path.c_str(), "rb"));
  if (!key_file) return absl::NotFoundError("--epp-tls-key: cannot read '" + key_path + "'");
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_PrivateKey(key_file.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return absl::InvalidArgumentError("--epp-tls-key: '" + key_path +
                                      "' is not an unencrypted PEM private key (" + OpenSslError() +
                                      ")");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("--epp-tls-key: '" + key_path +
                                      "' is not the key of the certificate in '" + cert_path + "'");
  }
  return absl::OkStatus();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> WatchedTlsCredentials(
    const std::string& cert_path, const std::string& key_path) {
  KVINDEX_RETURN_IF_ERROR(CheckKeyCertPair(cert_path, key_path));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      key_path, cert_path, kTlsRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(options);
  if (credentials == nullptr) {
    return absl::InternalError("--epp-tls-cert: gRPC refused the TLS credentials");
  }
  return credentials;
}

}  // namespace kvindex::epp
