// kvindex-bench: benchmarks that print figures next to a baseline measured in
// the same run. `kvindex-bench SUBCOMMAND --help` describes each one.

#include "shared/config/subcommands.h"

#if KVINDEX_BENCH_HAVE_INDEX
#include "services/bench/index/index_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_DECODE
#include "services/bench/decode/decode_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_HTTP
#include "services/bench/http/http_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_E2E
#include "services/bench/e2e/e2e_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_RESTART
#include "services/bench/restart/restart_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_EPP
#include "services/bench/epp/epp_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_TOKENIZE
#include "services/bench/tokenize/tokenize_bench.h"
#endif
#if KVINDEX_BENCH_HAVE_ALIASES
#include "services/bench/aliases/alias_bench.h"
#endif

namespace {

constexpr kvindex::config::Subcommand kSubcommands[] = {
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
#if KVINDEX_BENCH_HAVE_E2E
    {"e2e", "engines -> agent -> JetStream -> router -> /v1/match, next to --embedded",
     kvindex::bench::RunE2eBench},
#endif
#if KVINDEX_BENCH_HAVE_RESTART
    {"restart", "restart from a RocksDB checkpoint next to replaying the events",
     kvindex::bench::RunRestartBench},
#endif
#if KVINDEX_BENCH_HAVE_TOKENIZE
    {"tokenize", "tokenizer throughput per model next to Hugging Face tokenizers",
     kvindex::bench::RunTokenizeBench},
#endif
#if KVINDEX_BENCH_HAVE_EPP
    {"epp", "endpoint picks through gRPC (ext_proc) next to /v1/match over HTTP",
     kvindex::bench::RunEppBench},
#endif
#if KVINDEX_BENCH_HAVE_ALIASES
    {"aliases", "what a clear costs the SGLang alias map, next to the sweep it replaced",
     kvindex::bench::RunAliasBench},
#endif
};

}  // namespace

int main(int argc, char** argv) {
  return kvindex::config::DispatchSubcommand("kvindex-bench", "benchmarks with an in-run baseline",
                                             kSubcommands, argc, argv);
}
