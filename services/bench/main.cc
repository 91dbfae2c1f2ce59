// kvindex-bench: benchmarks that print figures next to a baseline measured in
// the same run. `kvindex-bench SUBCOMMAND --help` describes each one.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "kvindex/version.h"

#if KVINDEX_BENCH_HAVE_INDEX
#include "services/bench/index/index_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_DECODE
#include "services/bench/decode/decode_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_HTTP
#include "services/bench/http/http_bench.h"
#endif

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Subcommand kSubcommands[] = {
#if KVINDEX_BENCH_HAVE_INDEX
    {"index", "tiered index: apply throughput, lookup latency, bytes per entry",
     kvindex::bench::RunIndexBench},
#endif
#if KVINDEX_BENCH_HAVE_DECODE
    {"decode", "engine msgpack decode + normalize throughput", kvindex::bench::RunDecodeBench},
#endif
#if KVINDEX_BENCH_HAVE_HTTP
    {"http", "/v1/match over HTTP next to the in-process lookup", kvindex::bench::RunHttpBench},
#endif
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "kvindex-bench %s: benchmarks with an in-run baseline\n\n"
               "Usage: kvindex-bench SUBCOMMAND [options]   (SUBCOMMAND --help for options)\n\n"
               "Subcommands:\n",
               kvindex::kVersion);
  for (const Subcommand& sub : kSubcommands)
    std::fprintf(out, "  %-8s %s\n", sub.name, sub.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string_view first = argv[1];
  if (first == "--help" || first == "-h") {
    PrintUsage(stdout);
    return 0;
  }
  if (first == "--version") {
    std::printf("kvindex-bench %s\n", kvindex::kVersion);
    return 0;
  }
  for (const Subcommand& sub : kSubcommands) {
    if (first == sub.name) return sub.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kvindex-bench: unknown subcommand '%s' (see --help)\n", argv[1]);
  return 2;
}
