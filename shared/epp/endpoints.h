// EndpointTable: the endpoints the picker may choose, each tied to the
// index source (worker, dp_rank) whose cache it serves (docs/epp.md,
// "Endpoints"). Three origins, in order of precedence:
//   - the --source values' endpoint=HOST:PORT (SetStatic);
//   - --endpoints-file PATH, llm-d's file-discovery shape, re-read when the
//     file changes (checked at most every `reload_interval`):
//       endpoints:
//         - name: pod-a            # the worker, unless labels.worker is set
//           address: 10.0.0.7
//           port: 8000
//           labels: {model: M, dp_rank: "0", worker: w0}
//     A file that does not parse keeps the previous endpoints (counted).
//   - announced at run time (SetAnnounced: with --nats, the agents'
//     heartbeats on the log, live sources only), asked again at most every
//     `refresh_interval`; a source that a static or file endpoint already
//     names keeps that one (the static override).
// An endpoint with an empty model serves every model.
//
// Thread safety: Snapshot() and MaybeReload() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/ingest/source_spec.h"
#include "shared/model/source_key.h"

namespace kvindex::epp {

struct Endpoint {
  std::string address;  // "host:port", as written into x-gateway-destination-endpoint
  SourceKey source;     // the index source it serves
  std::string model;    // "" = any model

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct EndpointSet {
  std::vector<Endpoint> endpoints;
  // source -> index into endpoints (first endpoint of that source).
  absl::flat_hash_map<SourceKey, uint32_t> by_source;
  // index into endpoints -> the next endpoint of the same source, or
  // UINT32_MAX: with by_source, every endpoint of a source in order.
  std::vector<uint32_t> next_of_source;
};

// Endpoints of the sources that name one (endpoint=...).
std::vector<Endpoint> EndpointsFromSources(const std::vector<ingest::SourceSpec>& specs);

// Parses the file-discovery YAML text. InvalidArgument names the problem.
StatusOr<std::vector<Endpoint>> ParseEndpointsFile(const std::string& text);

class EndpointTable {
 public:
  EndpointTable() : snapshot_(std::make_shared<const EndpointSet>()) {}

  void SetStatic(std::vector<Endpoint> endpoints);
  // Reads `path` now (error if it cannot be read or parsed) and re-reads it
  // on change from then on.
  Status SetFile(std::string path,
                 std::chrono::milliseconds reload_interval = std::chrono::milliseconds(500));
  // The announced endpoints: `provider` is asked now and again on
  // MaybeReload, at most every `refresh_interval`.
  void SetAnnounced(std::function<std::vector<Endpoint>()> provider,
                    std::chrono::milliseconds refresh_interval = std::chrono::milliseconds(200));
  // Re-reads the file when its modification time or size changed, and asks
  // for the announced endpoints when they are due.
  void MaybeReload();

  std::shared_ptr<const EndpointSet> Snapshot() const;

  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }
  uint64_t reload_errors() const { return reload_errors_.load(std::memory_order_relaxed); }
  // Endpoints announced (not overridden) in the current snapshot.
  uint64_t announced() const { return announced_count_.load(std::memory_order_relaxed); }

 private:
  void Publish(std::vector<Endpoint> endpoints);
  // The static endpoints, the file's, then the announced ones of sources
  // neither names.
  std::vector<Endpoint> Combined() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Load();
  void RefreshAnnounced();

  mutable Mutex mu_;
  std::shared_ptr<const EndpointSet> snapshot_ ABSL_GUARDED_BY(mu_);
  std::vector<Endpoint> static_ ABSL_GUARDED_BY(mu_);
  std::vector<Endpoint> from_file_ ABSL_GUARDED_BY(mu_);
  std::vector<Endpoint> announced_ ABSL_GUARDED_BY(mu_);
  std::function<std::vector<Endpoint>()> provider_;  // set before the first pick
  std::chrono::milliseconds refresh_interval_{200};
  Mutex refresh_mu_;
  std::chrono::steady_clock::time_point next_refresh_ ABSL_GUARDED_BY(refresh_mu_);
  std::atomic<uint64_t> announced_count_{0};
  std::string path_;
  std::chrono::milliseconds reload_interval_{500};
  Mutex reload_mu_;
  std::chrono::steady_clock::time_point next_check_ ABSL_GUARDED_BY(reload_mu_);
  int64_t file_mtime_ns_ ABSL_GUARDED_BY(reload_mu_) = -1;
  int64_t file_size_ ABSL_GUARDED_BY(reload_mu_) = -1;
  std::atomic<uint64_t> reloads_{0}, reload_errors_{0};
};

}  // namespace kvindex::epp
