// ExtProcService: envoy.service.ext_proc.v3.ExternalProcessor/Process, the
// endpoint picker's gRPC face (docs/epp.md, "Protocol" and "Threading"). One
// bidirectional stream per HTTP request; its protocol is ExtProcExchange's.
//
// gRPC's callback API: each stream is a reactor (no thread of its own) that
// reads the next message as soon as the last is handled and writes the
// answers in order, one write in flight at a time. Messages are handled on
// gRPC's own threads; when the token chain may block (--render-url), the
// request side's messages are handled on a small pool of threads instead,
// so that a render call never stalls gRPC's polling.
//
// Thread safety: reactions run concurrently on gRPC's threads; per-stream
// state is its reactor's (its write queue under a mutex); shared state is
// the picker's and atomic counters.
#pragma once

#include <memory>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "shared/epp/ext_proc_exchange.h"
#include "shared/epp/picker.h"
#include "shared/epp/token_source.h"

namespace kvindex::epp {

class WorkerPool;

class ExtProcService final
    : public envoy::service::ext_proc::v3::ExternalProcessor::CallbackService {
 public:
  // `blocking_threads` > 0: the request side's messages are handled on a
  // pool of that many threads (token sources that block).
  ExtProcService(ServiceOptions options, Picker* picker, const TokenChain* tokens,
                 int blocking_threads);
  ~ExtProcService() override;

  grpc::ServerBidiReactor<envoy::service::ext_proc::v3::ProcessingRequest,
                          envoy::service::ext_proc::v3::ProcessingResponse>*
  Process(grpc::CallbackServerContext* context) override;

  const ServiceCounters& counters() const { return counters_; }

 private:
  class Reactor;

  const ServiceOptions options_;
  Picker* const picker_;
  const TokenChain* const tokens_;
  ServiceCounters counters_;
  std::unique_ptr<WorkerPool> pool_;
};

}  // namespace kvindex::epp
