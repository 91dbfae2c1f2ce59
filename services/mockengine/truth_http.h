// The simulator's own HTTP API (--truth-http), on shared/http's server:
//   GET  /healthz
//   GET  /v1/truth     the ground truth now (ground_truth.h)
//   POST /v1/match     the router's /v1/match answered from the truth
//                      (?view=index: from what the index may hold)
//   GET  /v1/progress  requests done, batches, events, the report so far
//
// Thread safety: handlers call the Cluster's locked accessors.
#pragma once

#include "services/mockengine/cluster.h"
#include "shared/http/server.h"

namespace kvindex::mockengine {

void RegisterTruthHttp(const Cluster& cluster, http::Server& server);

}  // namespace kvindex::mockengine
