// TLS for the endpoint picker's ext_proc port (--epp-tls-cert,
// --epp-tls-key; docs/epp.md "TLS"): gRPC's file-watcher certificate
// provider re-reads both PEM files every kTlsRefreshSeconds, so a rotated
// certificate (cert-manager renewing a Secret) is served to new
// connections without a restart; connections already open keep theirs.
//
// At start the pair is checked here (readable, PEM, the key matches the
// certificate) so a wrong path or pair is a one-line error, not a picker
// that refuses every handshake. After start, gRPC owns the files: a pair
// that no longer loads (a file missing) fails new handshakes (fail closed)
// until a good pair is back.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "shared/base/status.h"

namespace kvindex::epp {

// gRPC's minimum refresh interval for the file watcher.
inline constexpr unsigned kTlsRefreshSeconds = 1;

// OK when cert_path holds a PEM certificate (chain) and key_path the PEM
// private key of its first certificate.
Status CheckKeyCertPair(const std::string& cert_path, const std::string& key_path);

// Server credentials that watch the two files (after CheckKeyCertPair).
StatusOr<std::shared_ptr<grpc::ServerCredentials>> WatchedTlsCredentials(
    const std::string& cert_path, const std::string& key_path);

}  // namespace kvindex::epp
