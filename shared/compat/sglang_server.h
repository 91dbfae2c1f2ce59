// SglangServer: SGLang's KV indexer gRPC service (`kv_indexer.v1.KVIndexer`,
// proto/kv_indexer.proto) on its own port (kvindex-router --sglang-indexer
// ADDR), beside the endpoint picker's. Each RPC is SglangIndexer's answer
// (sglang_indexer.h) carried on the wire and counted in
// kvindex_router_compat_requests_total{api="sglang_...", outcome}.
//
// Cleartext gRPC, as sgl-router's `--kv-indexer-endpoint http://...` speaks;
// requests are bounded by SGLang's 8 MiB message limit.
//
//   SglangServer server({.listen = "127.0.0.1:0"}, &indexer, &compat);
//   KVINDEX_RETURN_IF_ERROR(server.Start());  // port() is the bound port
//   ...
//   server.Stop();
//
// Thread safety: Start and Stop from one thread; RPCs run on gRPC's threads.
#pragma once

#include <memory>
#include <string>

#include "shared/base/status.h"
#include "shared/compat/sglang_indexer.h"
#include "shared/query/compat_api.h"

namespace grpc {
class Server;
}

namespace kvindex::compat {

struct SglangServerOptions {
  // --sglang-indexer host:port (port 0 = any free port). Required.
  std::string listen;
};

class SglangServer {
 public:
  // `indexer` and `compat` must outlive the server.
  SglangServer(SglangServerOptions options, SglangIndexer* indexer, const query::CompatApi* compat);
  ~SglangServer();
  SglangServer(const SglangServer&) = delete;
  SglangServer& operator=(const SglangServer&) = delete;

  Status Start();
  void Stop();
  int port() const { return port_; }

 private:
  class Service;
  const SglangServerOptions options_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace kvindex::compat
