// The load-sample codec: engines' queue, running requests and KV-cache use
// as agents publish them on core NATS for the endpoint picker (docs/epp.md,
// "Load signals"; docs/events.md, "Load samples"). Load is not state: these
// messages never enter the JetStream log or a checkpoint.
//
// One message: a msgpack map {"v": 1, "agent": node, "ts_ns": u64,
// "samples": [{"worker", "dp_rank", "waiting", "running", "kv_use",
// "healthy"}, ...]}; unknown keys are ignored, a value absent is "not
// reported" (-1).
//
//   std::string bytes;
//   codec::EncodeLoadReport(report, &bytes);
//   KVINDEX_ASSIGN_OR_RETURN(auto report, codec::DecodeLoadReport(bytes));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/model/source_key.h"

namespace kvindex::codec {

inline constexpr uint32_t kLoadSchemaVersion = 1;
// Most samples one message may carry (an agent serves at most 256 sources).
inline constexpr size_t kMaxLoadSamples = 1024;

// One engine's load, as its Prometheus /metrics reported it.
struct EngineLoad {
  double waiting = -1;  // requests queued; -1 = not reported
  double running = -1;  // requests running; -1 = not reported
  double kv_use = -1;   // KV-cache use, 0..1; -1 = not reported
  // False when the engine did not answer its /metrics (or answered an
  // error): the picker does not pick it.
  bool healthy = true;

  friend bool operator==(const EngineLoad&, const EngineLoad&) = default;
};

struct SourceLoad {
  SourceKey source;
  EngineLoad load;

  friend bool operator==(const SourceLoad&, const SourceLoad&) = default;
};

struct LoadReport {
  std::string agent;   // node id of the sending agent
  uint64_t ts_ns = 0;  // agent wall clock at the scrape, ns since the epoch
  std::vector<SourceLoad> samples;

  friend bool operator==(const LoadReport&, const LoadReport&) = default;
};

void EncodeLoadReport(const LoadReport& report, std::string* out);

// InvalidArgument naming the field when the bytes are not a load report.
StatusOr<LoadReport> DecodeLoadReport(std::string_view bytes);

// Core NATS subjects of load reports: <prefix>_load.<node token> (outside
// the stream's <prefix>.> on purpose: load is never stored).
std::string LoadSubject(std::string_view prefix, std::string_view node);
std::string LoadSubjects(std::string_view prefix);  // <prefix>_load.*

}  // namespace kvindex::codec
