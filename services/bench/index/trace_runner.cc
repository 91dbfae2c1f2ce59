#include "services/bench/index/trace_runner.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "services/bench/index/latency.h"

namespace kvindex::bench {
namespace {

// Best effort: one core each for the writer and the reader on a 2-core box.
void PinToCpu(int cpu) {
  if (std::thread::hardware_concurrency() < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void UnpinCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned i = 0; i < std::thread::hardware_concurrency(); ++i) CPU_SET(i, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

uint64_t Depth(const StatusOr<index::MatchResult>& r) {
  uint64_t depth = 0;
  if (r.ok()) {
    for (const auto& w : r->workers) depth += w.longest;
  }
  return depth;
}

}  // namespace

TraceRun RunTrace(index::IndexInterface& index, const TraceStream& stream, double write_load,
                  size_t churn_requests) {
  const size_t churn =
      churn_requests == 0 ? stream.churn.size() : std::min(churn_requests, stream.churn.size());
  TraceRun out;
  uint64_t position = 0;
  const uint64_t t0 = NowNs();
  for (const SimRequest& r : stream.fill) {
    for (const PlacementEvent& e : r.events) {
      index.Apply(e, ++position);
      out.fill_block_ops += e.block_hashes.size();
    }
  }
  out.fill_seconds = static_cast<double>(NowNs() - t0) * 1e-9;
  out.apply_ops_per_s = static_cast<double>(out.fill_block_ops) / out.fill_seconds;
  const double write_rate = out.apply_ops_per_s * write_load;
  out.write_rate_target = write_rate;
  std::mt19937_64 rng(1);
  const size_t fill = stream.fill.size();
  // A router asks about requests like the ones being placed: draw queries
  // from a window of recent requests (fill tail, then churn as it advances).
  auto recent_query = [&](size_t progress) -> const std::vector<uint64_t>& {
    const size_t window = 4096;
    const size_t head = fill + progress;
    const size_t i = head - 1 - rng() % std::min(window, head);
    return i < fill ? stream.fill[i].query : stream.churn[i - fill].query;
  };

  PinToCpu(0);
  for (int i = 0; i < 50000; ++i) {
    const std::vector<uint64_t>& q = recent_query(0);
    uint32_t ns = 0;
    (void)TimedMatch(index, kTraceModel, q, &ns);
    out.idle_ns.push_back(ns);
  }

  std::atomic<size_t> progress{0};
  std::atomic<bool> done{false};
  uint64_t writer_ns = 0, writer_ops = 0;
  std::thread writer([&] {
    PinToCpu(1);
    const uint64_t start = NowNs();
    const double ns_per_op = 1e9 / write_rate;
    uint64_t ops = 0;
    for (size_t i = 0; i < churn; ++i) {
      for (const PlacementEvent& e : stream.churn[i].events) {
        index.Apply(e, ++position);
        ops += e.block_hashes.size();
      }
      progress.store(i + 1, std::memory_order_release);
      // Pace to the target rate (busy wait: sleeping has ~60 us granularity).
      const uint64_t due = start + static_cast<uint64_t>(static_cast<double>(ops) * ns_per_op);
      while (NowNs() < due) __builtin_ia32_pause();
    }
    writer_ns = NowNs() - start;
    writer_ops = ops;
    done.store(true, std::memory_order_release);
  });
  out.loaded_ns.reserve(8 << 20);
  while (!done.load(std::memory_order_acquire)) {
    const std::vector<uint64_t>& q = recent_query(progress.load(std::memory_order_acquire));
    uint32_t ns = 0;
    out.matched_blocks += Depth(TimedMatch(index, kTraceModel, q, &ns));
    if (out.loaded_ns.size() < out.loaded_ns.capacity()) out.loaded_ns.push_back(ns);
  }
  writer.join();
  UnpinCpu();
  out.write_rate_achieved = writer_ns > 0 ? static_cast<double>(writer_ops) * 1e9 / writer_ns : 0;
  out.stats = index.Stats();
  return out;
}

}  // namespace kvindex::bench
