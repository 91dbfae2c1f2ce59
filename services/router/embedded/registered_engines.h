// RegisteredEngines: the engines an embedded router follows because a
// client registered them (Mooncake's POST /register, RFC #1403;
// docs/compat.md), beside the ones given with --source.
//
//   RegisteredEnginesOptions options;
//   options.base = agent_options;             // node, replay timeouts, caps
//   options.state_file = data_dir + "/registrations.json";
//   RegisteredEngines engines(options, &sink, registry.get());
//   KVINDEX_RETURN_IF_ERROR(engines.Start());  // runs the saved registrations
//   context.registrations = &engines;          // /register, /unregister
//   engines.Stop();                            // stops them, keeps the file
//
// A registration is validated as a --source (ParseSourceSpec, plus: tcp://
// endpoints only, no field that would inject --source keys, one block size
// per model, no instance named by --source, no pub endpoint used twice) and
// runs as its own AgentPipeline of one source, publishing into the router's
// in-process log under its own node id ("<node>/register/<instance>/<rank>").
// Registering the same fields again is idempotent; other fields under a
// taken (instance, dp_rank) are refused (AlreadyExists). At most
// max_registrations run at once (ResourceExhausted past it).
// Unregistering stops the pipeline, then publishes "cleared" for the ranks
// it could have filled (those not held by another registration of the
// instance): what it held leaves the index as an expired source's would.
//
// Restarts: the registrations are saved to `state_file` (JSON, written to a
// temporary file and renamed, the directory synced) on every change and run
// again by Start; each starts cleared and replays its engine from seq 0 (its
// sequence state is not checkpointed, unlike a --source's). A saved entry
// that cannot start (refused for now: --max-registrations lowered, the
// model's block size, a pipeline that fails to start) stays in the file,
// pending: its instance is cleared from the index (unless a --source
// follows it now: those entries are the --source's), it is listed by
// Registered (/workers) and Follows, and retried every retry_interval until
// it runs or is unregistered. Only an entry that does not read back (a
// wrong type, an integer out of range) is dropped.
//
// The SGLang bridge (SetBridgeWorkers): an instance named like a worker the
// bridge feeds is refused (AlreadyExists), as the bridge refuses a worker
// named like a registered instance; each side claims the name before it
// checks the other's, so two racing claims cannot both win.
//
// Thread safety: Start/Stop from the controlling thread; Register,
// Unregister, Registered, Sources, Ready, Follows from any thread. Ready and
// Sources (/readyz, /v1/sources) never wait on a registration publishing
// "cleared" into a full in-process log (change_mu_ vs mu_).
#pragma once

#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/base/stop_signal.h"
#include "shared/ingest/agent_pipeline.h"
#include "shared/model/ingest_status.h"
#include "shared/publish/in_process_sink.h"
#include "shared/query/engine_registry.h"

namespace kvindex::router {

struct RegisteredEnginesOptions {
  // Node id prefix, replay timeouts, caps of every registration's pipeline
  // (its `sources` are ignored).
  ingest::AgentOptions base;
  // The --source entries: their workers and pub endpoints cannot be registered.
  std::vector<ingest::SourceSpec> configured;
  // Registrations running at once; 0 = /register refused. Default: 64.
  uint32_t max_registrations = 64;
  // Where the registrations are saved; "" = not saved (lost on restart).
  std::string state_file;
  // The block size the index already knows for a model (nullopt: none).
  std::function<std::optional<uint32_t>(const std::string& model)> model_block_size;
  // How often saved registrations that could not start are tried again.
  std::chrono::milliseconds retry_interval{5000};
};

class RegisteredEngines final : public query::EngineRegistry {
 public:
  // `sink` must outlive this object; `registry` is nullable.
  RegisteredEngines(RegisteredEnginesOptions options, InProcessSink* sink,
                    prometheus::Registry* registry);
  ~RegisteredEngines() override;

  // Runs the registrations saved in state_file (a missing file = none; an
  // unreadable one or an entry no longer valid is logged and skipped).
  Status Start();
  // The instances state_file names (before Start: the checkpoint's resume
  // check leaves them out, they start cleared).
  std::vector<std::string> SavedInstances() const;
  // Stops every pipeline (the file keeps them for the next Start).
  void Stop();
  // True for a worker id the SGLang bridge feeds (null = none). Called
  // under this object's lock: it must not call back into it.
  void SetBridgeWorkers(std::function<bool(const std::string& worker)> in_use);

  Status Register(const query::EngineRegistration& registration, bool* created) override;
  Status Unregister(const std::string& instance_id, std::optional<uint32_t> dp_rank,
                    std::vector<std::string>* removed) override;
  std::vector<query::EngineRegistration> Registered() const override;

  // Every registration's source status; ready once each finished its
  // start-up replay attempt.
  std::vector<IngestSourceStatus> Sources() const;
  bool Ready() const;
  size_t size() const;
  // True when `instance` is a --source worker or a registered instance
  // (running, starting or pending).
  bool Follows(const std::string& instance) const;

 private:
  struct Entry {
    query::EngineRegistration registration;
    ingest::SourceSpec spec;
    std::string node;
    std::unique_ptr<ingest::AgentPipeline> pipeline;
  };
  using Key = std::pair<std::string, uint32_t>;  // (instance, dp_rank)
  // A saved registration that could not start (kept in the file, retried).
  struct Pending {
    query::EngineRegistration registration;
    std::string error;
  };

  StatusOr<ingest::SourceSpec> Validate(const query::EngineRegistration& registration) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Validates, starts and adds one registration (saved when `persist`).
  Status StartOne(const query::EngineRegistration& registration, bool persist)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // The "cleared" events for what a registration of (instance, dp_rank)
  // could have filled, stamped with agent `node`.
  std::vector<PlacementEvent> ClearsFor(const std::string& instance, uint32_t dp_rank,
                                        const std::string& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NodeOf(const query::EngineRegistration& registration) const;
  // Tries the pending registrations again (the retry thread).
  void RetryPending() ABSL_LOCKS_EXCLUDED(change_mu_, mu_);
  // Stops the entry's pipeline (out of entries_), then publishes `clears`.
  void StopAndPublish(Entry& entry, const std::vector<PlacementEvent>& clears)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  Status Save() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RegisteredEnginesOptions options_;
  InProcessSink* const sink_;
  prometheus::Registry* const registry_;
  // Start, Stop, Register, Unregister one at a time; held while a pipeline
  // stops and while "cleared" is published (Publish waits on a full log).
  Mutex change_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // entries_, for Ready, Sources, Registered, size, Follows: never held
  // while publishing into the log or stopping a pipeline.
  mutable Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Registrations whose pipeline is starting (claimed, not yet in entries_).
  std::set<Key> starting_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::function<bool(const std::string&)> bridge_workers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(change_mu_) = false;
  StopSignal retry_stop_;
  std::thread retry_thread_;  // Start and Stop only
};

}  // namespace kvindex::router
