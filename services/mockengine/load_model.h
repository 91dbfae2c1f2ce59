// LoadModel: a simulated clock for placement decisions and the engines'
// load gauges, deterministic (no wall clock), documented in README.md
// ("Load model").
//
// Arrival of request r: the trace's timestamp (ms) when the trace's
// timestamps increase, else r / rate. Service time: (uncached prompt tokens
// * prefill_us_per_token + output tokens * decode_us_per_token) / speed.
// Each source runs at most `max_running` requests at once (vLLM's
// max_num_seqs; 0 = no limit); a request that finds every slot busy waits,
// first come first served, until the earliest running one finishes. It is
// waiting from its arrival to its start, running from its start to start +
// service, and holds its prompt's blocks on the device while it runs (the
// engine's KV-cache use, as vLLM reports it: blocks of running requests,
// not cached ones, not those of waiting requests).
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <span>
#include <vector>

#include "shared/trace/mooncake_trace.h"

namespace kvindex::mockengine {

struct LoadOptions {
  double prefill_us_per_token = 20;
  double decode_us_per_token = 2000;
};

// Arrival times in microseconds from the first request.
std::vector<double> ArrivalTimesUs(std::span<const trace::TraceRequest> requests, double rate);

// One source's queue at an instant.
struct SourceLoad {
  uint32_t running = 0;
  uint32_t waiting = 0;
  uint64_t blocks = 0;  // device blocks of the running requests
};

class LoadModel {
 public:
  // `max_running[k]`: requests source k runs at once (0 = no limit); a
  // source without an entry has no limit.
  LoadModel(LoadOptions options, size_t sources, std::vector<uint32_t> max_running = {});

  // Requests placed on `source` and not finished at `now_us`, waiting or
  // running (calls with non-decreasing `now_us` across all sources).
  uint32_t InFlight(size_t source, double now_us);
  // Running, waiting and the running requests' device blocks at `now_us`.
  SourceLoad Load(size_t source, double now_us);
  // Places a request on `source` arriving at `now_us` (not before the last
  // call's time) that holds `blocks` device blocks while it runs; it starts
  // when a slot is free (*wait_us: how long it waits for one). Returns its
  // service time (start to finish).
  double Start(size_t source, double now_us, uint64_t uncached_tokens, uint32_t output_tokens,
               double speed, uint64_t blocks = 0, double* wait_us = nullptr);

 private:
  struct Queue {
    uint32_t max_running = 0;
    // Start times of the requests not started yet, with their blocks; FIFO
    // makes starts non-decreasing, so the earliest is in front.
    std::deque<std::pair<double, uint64_t>> starts;
    // (finish time, blocks) of every request not finished, earliest on top.
    std::priority_queue<std::pair<double, uint64_t>, std::vector<std::pair<double, uint64_t>>,
                        std::greater<>>
        finishes;
    // Slot free times (max_running of them once full), earliest on top.
    std::priority_queue<double, std::vector<double>, std::greater<>> slots;
    uint64_t running_blocks = 0;
  };
  // Moves `queue` to `now_us`: starts what has started, ends what has finished.
  static void Advance(Queue& queue, double now_us);

  LoadOptions options_;
  std::vector<Queue> queues_;
};

}  // namespace kvindex::mockengine
