#include "shared/compat/sglang_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "kv_indexer.grpc.pb.h"
#include "shared/log/log.h"

namespace kvindex::compat {
namespace {

using Api = query::CompatApi::Api;

}  // namespace

class SglangServer::Service final : public pb::KVIndexer::Service {
 public:
  Service(SglangIndexer* indexer, const query::CompatApi* compat)
      : indexer_(indexer), compat_(compat) {}

  grpc::Status MatchExternalKvPrefix(grpc::ServerContext*,
                                     const pb::MatchExternalKvPrefixRequest* request,
                                     pb::MatchExternalKvPrefixResponse* response) override {
    return Answer(Api::kSglangMatchPrefix, indexer_->MatchPrefix(*request, response));
  }
  grpc::Status MatchExternalKv(grpc::ServerContext*, const pb::MatchExternalKvRequest* request,
                               pb::MatchExternalKvResponse* response) override {
    return Answer(Api::kSglangMatch, indexer_->Match(*request, response));
  }
  grpc::Status GetExternalKvHitCounts(grpc::ServerContext*,
                                      const pb::GetExternalKvHitCountsRequest* request,
                                      pb::GetExternalKvHitCountsResponse* response) override {
    return Answer(Api::kSglangHitCounts, indexer_->HitCounts(*request, response));
  }
  grpc::Status ApplyExternalKvBatch(grpc::ServerContext*,
                                    const pb::ApplyExternalKvBatchRequest* request,
                                    pb::ApplyExternalKvBatchResponse*) override {
    return Answer(Api::kSglangApplyBatch, indexer_->ApplyBatch(*request));
  }

 private:
  grpc::Status Answer(Api api, const SglangStatus& status) const {
    compat_->Record(api, status.outcome);
    if (status.ok()) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(status.code), status.message);
  }

  SglangIndexer* const indexer_;
  const query::CompatApi* const compat_;
};

SglangServer::SglangServer(SglangServerOptions options, SglangIndexer* indexer,
                           const query::CompatApi* compat)
    : options_(std::move(options)), service_(std::make_unique<Service>(indexer, compat)) {}

SglangServer::~SglangServer() { Stop(); }

Status SglangServer::Start() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kSglangMaxMessageBytes));
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError("--sglang-indexer: cannot listen on '" + options_.listen + "'");
  }
  log::Get("router")->info("SGLang KV indexer (gRPC kv_indexer.v1.KVIndexer) on port {}", port_);
  return absl::OkStatus();
}

void SglangServer::Stop() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
}

}  // namespace kvindex::compat
