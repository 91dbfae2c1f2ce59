// The machine a benchmark ran on, for its JSON: the CPU model, the CPUs online
// and the load averages at the time of the call. Figures from different
// sessions are only comparable on the same host, and a loaded host moves
// every latency figure, so each `--json` result says where it came from.
//
//   nlohmann::json j = {...};
//   j["host"] = kvindex::bench::HostJson();
#ifndef KVINDEX_SERVICES_BENCH_HOST_HOST_INFO_H_
#define KVINDEX_SERVICES_BENCH_HOST_HOST_INFO_H_

#include <nlohmann/json.hpp>

namespace kvindex::bench {

// {"cpu_model": "...", "cpus_online": N, "load_average": [1 min, 5 min, 15 min]};
// a value that cannot be read is left out.
nlohmann::json HostJson();

}  // namespace kvindex::bench

#endif  // KVINDEX_SERVICES_BENCH_HOST_HOST_INFO_H_
