// The router the HTTP fuzz targets query: a real index (model "m", block
// size 4; workers "101", "202" and "w-x", one tier each) filled through the
// real apply loop from an in-process log, behind the real RouterApi (its
// /v1/match and compatibility handlers, /v1/state, /v1/workers, a small
// /v1/checkpoint). Built once per process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shared/consume/apply_loop.h"
#include "shared/consume/in_process_log_reader.h"
#include "shared/consume/router_probe.h"
#include "shared/consume/testing/wait_applied.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/index/kv_index.h"
#include "shared/publish/in_process_sink.h"
#include "shared/query/router_api.h"
#include "tests/fuzz/fuzz_check.h"

// The index keeps its source records in reserved, mmap'd tables that
// LeakSanitizer does not scan, so while the fixture's index is alive its
// records look leaked to libFuzzer's per-input leak check: leak detection
// is off for the targets that use this fixture (ASan's other checks stay).
// Defined here, not inline (an unused inline function is never emitted):
// include this header from one file per fuzz binary.
extern "C" __attribute__((used)) const char* __asan_default_options() { return "detect_leaks=0"; }

namespace kvindex::fuzz {

struct Router {
  Router() {
    probe.Bind(&index, [this] { return loop.Pending(); });
    FUZZ_CHECK(loop.Start().ok(), "apply loop starts");
    std::vector<uint32_t> tokens;
    for (uint32_t t = 1; t <= 13; ++t) tokens.push_back(t);
    std::vector<uint64_t> local, seq;
    hashing::ComputeLocalHashes(tokens, 4, hashing::LocalHashSeed("", ""), &local);
    hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
    std::vector<PlacementEvent> events;
    const char* workers[] = {"101", "202", "w-x"};
    for (int w = 0; w < 3; ++w) {
      PlacementEvent e;
      e.kind = PlacementKind::kStored;
      e.model = "m";
      e.source = {workers[w], static_cast<uint32_t>(w)};
      e.agent = "node-a";
      e.tier = static_cast<Tier>(w);
      e.block_size = 4;
      e.block_hashes.assign(seq.begin(), seq.begin() + 3 - w);
      events.push_back(std::move(e));
    }
    FUZZ_CHECK(sink.Publish(events).ok(), "publish");
    FUZZ_CHECK(consume::testing::WaitUntilApplied(loop), "apply loop caught up");
    query::ApiContext context;
    context.index = &index;
    context.apply = &loop;
    context.probe = &probe;
    context.configured_models = {{"m", 4}, {"configured", 16}};
    context.checkpoint = [](uint64_t* applied_seq) -> StatusOr<std::string> {
      *applied_seq = 3;
      return std::string("kvindex-checkpoint-1\n(fuzz)");
    };
    api = std::make_unique<query::RouterApi>(query::ApiOptions{}, context);
  }
  InProcessSink sink;
  consume::InProcessLogReader reader{&sink};
  index::KvIndex index;
  consume::RouterProbe probe;
  consume::ApplyLoop loop{&reader, &index, &probe, {}};
  std::unique_ptr<query::RouterApi> api;
};

// Destroyed at exit (the apply loop stopped, the index freed), so that
// LeakSanitizer's exit check sees no fixture memory.
inline Router& TheRouter() {
  static Router router;
  return router;
}

}  // namespace kvindex::fuzz
