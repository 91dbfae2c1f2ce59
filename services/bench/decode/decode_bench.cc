#include "services/bench/decode/decode_bench.h"

#include <time.h>
#include <CLI/CLI.hpp>
#include <algorithm>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "services/bench/decode/tree_baseline.h"
#include "services/bench/decode/workload.h"
#include "shared/config/cli.h"
#include "shared/normalize/source_processor.h"
#include "shared/wire/batch_decoder.h"

namespace kvindex::bench {
namespace {

// Thread CPU time, not wall time: the figure is "per core", and on a shared
// 2-vCPU machine wall time mostly measures the neighbours.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Args {
  bool json = false;
  uint32_t batches = 20000;
  uint32_t rounds = 5;
  uint64_t seed = 1;
  uint32_t block_size = 16;
};

normalize::SourceOptions Options(uint32_t block_size, uint32_t expected_blocks) {
  normalize::SourceOptions options;
  options.expected_blocks = expected_blocks;
  options.worker = "bench-worker";
  options.model = "bench-model";
  options.block_size = block_size;
  return options;
}

// One timed pass over a workload; returns drops (must stay 0 for kvindex).
using Pass = std::function<uint64_t()>;

struct Measurement {
  const char* name;
  Pass pass;
  std::vector<double> seconds;
  uint64_t dropped = 0;
  double Median() const {
    std::vector<double> sorted = seconds;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
};

uint64_t TotalDropped(const normalize::SourceStats& stats) {
  uint64_t total = 0;
  for (const auto& counter : stats.dropped) total += counter.load();
  return total;
}

// kvindex: decode + normalize on a fresh processor (state grows from empty).
Pass Pipeline(const Workload& w, uint32_t block_size) {
  return [&w, block_size] {
    normalize::SourceStats stats;
    normalize::SourceProcessor processor(Options(block_size, w.expected_blocks), &stats);
    std::vector<PlacementEvent> out;
    for (const std::vector<uint8_t>& payload : w.payloads) {
      out.clear();
      processor.ProcessPayload(payload, &out).IgnoreError();  // counted in stats
    }
    return TotalDropped(stats);
  };
}

Pass DecodeOnly(const Workload& w) {
  return [&w] {
    wire::BatchDecoder decoder;
    wire::EngineBatch batch;
    uint64_t errors = 0;
    for (const std::vector<uint8_t>& payload : w.payloads) {
      if (!decoder.Decode(payload, &batch).ok()) ++errors;
    }
    return errors;
  };
}

Pass BaselineDecode(const Workload& w) {
  return [&w] {
    TreeBaselineDecoder decoder;
    wire::EngineBatch batch;
    uint64_t errors = 0;
    for (const std::vector<uint8_t>& payload : w.payloads) {
      if (!decoder.Decode(payload, &batch).ok()) ++errors;
    }
    return errors;
  };
}

Pass BaselinePipeline(const Workload& w, uint32_t block_size) {
  return [&w, block_size] {
    TreeBaselineDecoder decoder;
    wire::EngineBatch batch;
    normalize::SourceStats stats;
    normalize::SourceProcessor processor(Options(block_size, w.expected_blocks), &stats);
    std::vector<PlacementEvent> out;
    for (const std::vector<uint8_t>& payload : w.payloads) {
      out.clear();
      if (decoder.Decode(payload, &batch).ok()) processor.ProcessDecoded(batch, &out);
    }
    return TotalDropped(stats);
  };
}

}  // namespace

int RunDecodeBench(int argc, char** argv) {
  Args args;
  CLI::App app{
      "Engine msgpack decode + normalize throughput, next to a msgpack object-tree "
      "baseline measured in the same run.",
      "kvindex-bench decode"};
  app.add_flag("--json", args.json, "Print one JSON object instead of text");
  app.add_option("--batches", args.batches, "Payloads in the generated stream")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--rounds", args.rounds, "Timed passes over the stream (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", args.seed, "Workload seed")->capture_default_str();
  app.add_option("--block-size", args.block_size, "Tokens per block")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  if (std::optional<int> exit_code = config::Parse(app, argc, argv)) return *exit_code;

  WorkloadOptions mix_options;
  mix_options.block_size = args.block_size;
  mix_options.seed = args.seed;
  mix_options.batches = args.batches;
  const Workload mix = GenerateWorkload(mix_options);
  WorkloadOptions gpu_options = mix_options;
  gpu_options.cpu_offload = false;
  gpu_options.max_events_per_batch = 1;
  gpu_options.gpu_capacity_blocks = 127626;  // GPU blocks of vLLM's example worker
  const Workload gpu = GenerateWorkload(gpu_options);

  // Rounds are interleaved (every measurement once per round) so that noise
  // from a shared machine hits kvindex and the baseline alike.
  std::vector<Measurement> m = {
      {"mix kvindex decode+normalize", Pipeline(mix, args.block_size), {}, 0},
      {"mix kvindex decode", DecodeOnly(mix), {}, 0},
      {"mix baseline tree+walk", BaselineDecode(mix), {}, 0},
      {"mix baseline tree+walk+normalize", BaselinePipeline(mix, args.block_size), {}, 0},
      {"gpu kvindex decode+normalize", Pipeline(gpu, args.block_size), {}, 0},
      {"gpu baseline tree+walk", BaselineDecode(gpu), {}, 0},
      {"gpu baseline tree+walk+normalize", BaselinePipeline(gpu, args.block_size), {}, 0},
  };
  for (uint32_t round = 0; round < args.rounds; ++round) {
    for (Measurement& measurement : m) {
      const double start = ThreadCpuSeconds();
      measurement.dropped = measurement.pass();
      measurement.seconds.push_back(ThreadCpuSeconds() - start);
    }
  }

  const auto rate = [](uint64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; };
  const double blocks_per_s = rate(mix.blocks, m[0].Median());
  const double events_per_s = rate(mix.events, m[0].Median());
  const double decode_blocks_per_s = rate(mix.blocks, m[1].Median());
  const double baseline_blocks_per_s = rate(mix.blocks, m[2].Median());
  const double baseline_pipeline_blocks_per_s = rate(mix.blocks, m[3].Median());
  // GPU scenario: stored blocks per second of the whole stream (evictions
  // included in the time, not in the count).
  const double gpu_blocks_per_s = rate(gpu.stored_blocks, m[4].Median());
  const double gpu_baseline_decode_blocks_per_s = rate(gpu.stored_blocks, m[5].Median());
  const double gpu_baseline_blocks_per_s = rate(gpu.stored_blocks, m[6].Median());
  const uint64_t dropped = m[0].dropped + m[1].dropped + m[4].dropped;
  const uint64_t baseline_dropped = m[3].dropped + m[6].dropped;

  nlohmann::ordered_json j = {
      {"benchmark", "decode"},
      {"block_size", args.block_size},
      {"batches", mix.payloads.size()},
      {"events", mix.events},
      {"blocks", mix.blocks},
      {"payload_bytes", mix.bytes},
      {"rounds", args.rounds},
      {"blocks_per_s", blocks_per_s},
      {"events_per_s", events_per_s},
      {"baseline_blocks_per_s", baseline_blocks_per_s},
      {"speedup_vs_baseline", baseline_blocks_per_s > 0 ? blocks_per_s / baseline_blocks_per_s : 0},
      {"decode_only_blocks_per_s", decode_blocks_per_s},
      {"decode_only_speedup",
       baseline_blocks_per_s > 0 ? decode_blocks_per_s / baseline_blocks_per_s : 0},
      {"baseline_pipeline_blocks_per_s", baseline_pipeline_blocks_per_s},
      {"pipeline_speedup",
       baseline_pipeline_blocks_per_s > 0 ? blocks_per_s / baseline_pipeline_blocks_per_s : 0},
      {"gpu_store_blocks_per_s", gpu_blocks_per_s},
      {"gpu_store_baseline_blocks_per_s", gpu_baseline_decode_blocks_per_s},
      {"gpu_store_baseline_pipeline_blocks_per_s", gpu_baseline_blocks_per_s},
      {"gpu_store_blocks", gpu.stored_blocks},
      {"dropped", dropped},
      {"baseline_dropped", baseline_dropped},
  };
  if (args.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "kvindex-bench decode: %zu batches, %llu events, %llu blocks (%.1f MB), block size %u, "
      "median of %u rounds, one thread, thread CPU time\n\n",
      mix.payloads.size(), static_cast<unsigned long long>(mix.events),
      static_cast<unsigned long long>(mix.blocks), static_cast<double>(mix.bytes) / 1e6,
      args.block_size, args.rounds);
  std::printf("%-52s %14s %14s\n", "realistic mix (GPU stores, removals, CPU chunks)", "blocks/s",
              "events/s");
  std::printf("%-52s %14.0f %14.0f\n", "  kvindex decode + normalize", blocks_per_s, events_per_s);
  std::printf("%-52s %14.0f\n", "  kvindex decode only", decode_blocks_per_s);
  std::printf("%-52s %14.0f\n", "  baseline: msgpack tree + walk", baseline_blocks_per_s);
  std::printf("%-52s %14.0f\n", "  baseline: msgpack tree + walk + same normalize",
              baseline_pipeline_blocks_per_s);
  std::printf("%-52s %14.2fx\n", "  speedup (decode+normalize vs tree+walk)",
              blocks_per_s / baseline_blocks_per_s);
  std::printf("%-52s %14.2fx\n", "  speedup (decode only vs tree+walk)",
              decode_blocks_per_s / baseline_blocks_per_s);
  std::printf("%-52s %14.2fx\n", "  speedup (full pipelines)",
              blocks_per_s / baseline_pipeline_blocks_per_s);
  std::printf("\n%-52s %14s\n", "GPU stores (1-32 blocks x 16 tokens, evict at 127626)",
              "stored/s");
  std::printf("%-52s %14.0f\n", "  kvindex decode + normalize", gpu_blocks_per_s);
  std::printf("%-52s %14.0f\n", "  baseline: msgpack tree + walk",
              gpu_baseline_decode_blocks_per_s);
  std::printf("%-52s %14.0f\n", "  baseline: msgpack tree + walk + same normalize",
              gpu_baseline_blocks_per_s);
  std::printf("\ndropped events/blocks (must be 0): %llu\n",
              static_cast<unsigned long long>(dropped));
  return 0;
}

}  // namespace kvindex::bench
