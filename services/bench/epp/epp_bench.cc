#include "services/bench/epp/epp_bench.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "services/bench/epp/match_client.h"
#include "services/bench/epp/pick_client.h"
#include "services/bench/epp/pick_loop.h"
#include "services/bench/http/synthetic_index.h"
#include "shared/base/percentile.h"
#include "shared/config/cli.h"
#include "shared/consume/apply_loop.h"
#include "shared/consume/in_process_log_reader.h"
#include "shared/epp/epp_server.h"
#include "shared/http/server.h"
#include "shared/index/kv_index.h"
#include "shared/publish/in_process_sink.h"
#include "shared/query/router_api.h"

namespace kvindex::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kModel[] = "bench-model";

struct Options {
  uint64_t entries = 10'000'000;
  uint32_t workers = 64;
  uint32_t block_size = 16;
  uint32_t replicas = 8;  // workers holding (a prefix of) each prompt
  uint32_t queries = 64;  // distinct prompts per size
  std::vector<uint32_t> sizes = {1024, 8192, 32768};
  std::vector<uint32_t> streams = {1, 16, 64};
  uint32_t channels = 2;               // gRPC connections (Envoy: one per worker thread)
  uint32_t speculative_ttl_ms = 2000;  // the router's default
  std::string duration = "3s";
  uint64_t seed = 42;
  bool json = false;
  std::string client = "callback";  // or "threads": a blocking client thread per stream
  bool http = true;  // also time /v1/match (--no-http: the picks alone, e.g. under a profiler)
};

std::string WorkerName(uint32_t w) { return SyntheticWorkerName(w); }
// EndpointOf's inverse: the worker name behind an "10.0.a.b:8000" address.
std::string WorkerOfEndpoint(const std::string& endpoint) {
  unsigned a = 0, b = 0;
  if (std::sscanf(endpoint.c_str(), "10.0.%u.%u:8000", &a, &b) != 2) return "";
  return WorkerName(a * 256 + b);
}
std::string EndpointOf(uint32_t w) {
  return "10.0." + std::to_string(w / 256) + "." + std::to_string(w % 256) + ":8000";
}

std::string TokenList(const std::vector<uint32_t>& tokens, size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i != 0) out.push_back(',');
    out += std::to_string(tokens[i]);
  }
  out += "]";
  return out;
}

struct Cell {
  uint32_t tokens = 0, streams = 0;
  double picks_per_s = 0, pick_p50_ms = 0, pick_p99_ms = 0, stream_p50_ms = 0;
  double cpu_us_per_pick = 0;  // the process's CPU time (servers and clients) per pick
  double match_per_s = 0, match_p50_ms = 0, match_p99_ms = 0;
  uint64_t pick_errors = 0, match_errors = 0;
};

// CPU time of the whole process so far (user + system), in seconds: per
// pick, it bounds the picks per second two cores can give whatever else
// the machine runs.
double ProcessCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Sampled {
  double per_s = 0, p50_ms = 0, p99_ms = 0, other_p50_ms = 0;
  uint64_t errors = 0;
};

// Runs `threads` closed-loop clients for `seconds`; client(t, i) returns
// false on an error, else appends its latencies.
template <typename MakeClient>
Sampled RunClients(uint32_t threads, double seconds, MakeClient make_client) {
  std::vector<std::vector<double>> latencies(threads), others(threads);
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  const auto start = Clock::now();
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto one = make_client(t);
      latencies[t].reserve(1 << 16);
      for (size_t i = t; !stop.load(std::memory_order_relaxed); ++i) {
        if (!one(i, &latencies[t], &others[t])) errors.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& thread : pool) thread.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all, other;
  for (uint32_t t = 0; t < threads; ++t) {
    all.insert(all.end(), latencies[t].begin(), latencies[t].end());
    other.insert(other.end(), others[t].begin(), others[t].end());
  }
  Sampled s;
  s.errors = errors.load();
  s.per_s = static_cast<double>(all.size()) / wall;
  s.p50_ms = Percentile(all, 0.50) * 1e3;
  s.p99_ms = Percentile(all, 0.99) * 1e3;
  s.other_p50_ms = Percentile(std::move(other), 0.50) * 1e3;
  return s;
}

}  // namespace

int RunEppBench(int argc, char** argv) {
  Options o;
  CLI::App app{
      "kvindex-bench epp: endpoint picks through gRPC (ext_proc) next to /v1/match over "
      "HTTP on the same prompts",
      "kvindex-bench epp"};
  app.add_option("--entries", o.entries, "(source, block) entries to build")->capture_default_str();
  app.add_option("--workers", o.workers, "Workers (sources, one endpoint each)")
      ->capture_default_str();
  app.add_option("--block-size", o.block_size, "Tokens per block")->capture_default_str();
  app.add_option("--replicas", o.replicas, "Workers holding each prompt")->capture_default_str();
  app.add_option("--queries", o.queries, "Distinct prompts per size")->capture_default_str();
  app.add_option("--sizes", o.sizes, "Prompt sizes in tokens")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--streams", o.streams, "Concurrent streams (and HTTP connections)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--channels", o.channels, "gRPC connections the streams share")
      ->capture_default_str();
  app.add_option("--speculative-ttl-ms", o.speculative_ttl_ms,
                 "Predict on route in the timed picker (0 = off)")
      ->capture_default_str();
  app.add_option("--duration", o.duration, "Run time of each measurement")->capture_default_str();
  app.add_option("--seed", o.seed, "Workload seed")->capture_default_str();
  app.add_option("--client", o.client,
                 "Gateway side: callback (gRPC callback API, no thread per stream) or threads "
                 "(a blocking client thread per stream, as before)")
      ->check(CLI::IsMember({"callback", "threads"}))
      ->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON object");
  app.add_flag("--http-match,!--no-http-match", o.http, "Also time /v1/match over HTTP")
      ->capture_default_str();
  if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
  auto duration = config::ParseDuration(o.duration);
  if (!duration.ok() || duration->count() <= 0) {
    std::fprintf(stderr, "kvindex-bench epp: bad --duration '%s'\n", o.duration.c_str());
    return 2;
  }
  if (o.workers == 0 || o.block_size == 0 || o.queries == 0 || o.sizes.empty() ||
      o.streams.empty() || o.channels == 0 ||
      std::any_of(o.sizes.begin(), o.sizes.end(),
                  [&](uint32_t s) { return s < 4 * o.block_size; }) ||
      std::any_of(o.streams.begin(), o.streams.end(), [](uint32_t s) { return s == 0; })) {
    std::fprintf(stderr,
                 "kvindex-bench epp: need workers, block-size, queries, channels > 0, streams "
                 "> 0, sizes >= 4 blocks\n");
    return 2;
  }
  const double seconds = static_cast<double>(duration->count()) / 1000.0;

  // 1. The index.
  auto index = std::make_unique<index::KvIndex>();
  const auto build_start = Clock::now();
  const auto prompts = BuildSyntheticIndex(
      {.model = kModel,
       .entries = o.entries,
       .workers = o.workers,
       .block_size = o.block_size,
       .prompt_blocks = *std::max_element(o.sizes.begin(), o.sizes.end()) / o.block_size,
       .replicas = o.replicas,
       .queries = o.queries,
       .max_shared_blocks = 64,
       .seed = o.seed},
      index.get());
  const double build_s = std::chrono::duration<double>(Clock::now() - build_start).count();
  uint64_t total_entries = 0;
  for (uint64_t e : index->Stats().entries) total_entries += e;
  if (!o.json) {
    std::printf("index: %llu entries over %u workers, built in %.1f s\n",
                static_cast<unsigned long long>(total_entries), o.workers, build_s);
    std::fflush(stdout);
  }

  // 2. The picker (the router's EppServer) and /v1/match over the same index.
  epp::EppOptions epp_options;
  epp_options.listen = "127.0.0.1:0";
  for (uint32_t w = 0; w < o.workers; ++w) {
    epp::Endpoint endpoint;
    endpoint.address = EndpointOf(w);
    endpoint.source.worker = WorkerName(w);
    endpoint.model = kModel;
    epp_options.static_endpoints.push_back(std::move(endpoint));
  }
  // The timed picker runs the router's defaults (predict on route on, with
  // --speculative-ttl-ms); the checking one runs without speculation, so
  // its picks must be exactly the index's best.
  const std::string config_dir =
      std::filesystem::temp_directory_path() / ("kvindex-bench-epp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(config_dir);
  auto write_config = [&](const std::string& name, uint32_t ttl_ms) {
    const std::string path = config_dir + "/" + name;
    std::ofstream(path) << "speculative: {ttl_ms: " << ttl_ms << "}\n";
    return path;
  };
  epp_options.config_path = write_config("timed.yaml", o.speculative_ttl_ms);
  epp::EppServer picker(epp_options, index.get(), [] { return true; });
  epp_options.config_path = write_config("check.yaml", 0);
  epp::EppServer checker(epp_options, index.get(), [] { return true; });
  for (epp::EppServer* server : {&picker, &checker}) {
    if (Status status = server->Start(); !status.ok()) {
      std::fprintf(stderr, "kvindex-bench epp: %s\n", status.ToString().c_str());
      std::filesystem::remove_all(config_dir);
      return 1;
    }
  }
  std::filesystem::remove_all(config_dir);
  auto check_channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(checker.port()),
                                           grpc::InsecureChannelCredentials());
  InProcessSink sink;
  consume::InProcessLogReader reader(&sink);
  consume::ApplyLoop loop(&reader, index.get(), nullptr, {});  // not started: nothing to apply
  query::ApiContext context;
  context.index = index.get();
  context.apply = &loop;
  query::RouterApi api({}, context);
  http::ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.max_connections_per_client = server_options.max_connections;
  http::Server server(server_options);
  api.Register(server);
  if (Status status = server.Start(); !status.ok()) {
    std::fprintf(stderr, "kvindex-bench epp: %s\n", status.ToString().c_str());
    return 1;
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (uint32_t c = 0; c < o.channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("kvindex.bench.channel", static_cast<int>(c));  // a connection each
    args.SetMaxReceiveMessageSize(64 << 20);
    channels.push_back(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(picker.port()),
                                                 grpc::InsecureChannelCredentials(), args));
  }

  // 3. Every size x stream count: picks, then /v1/match.
  std::vector<Cell> cells;
  uint64_t wrong_picks = 0, checked = 0;
  for (const uint32_t size : o.sizes) {
    std::vector<std::string> pick_bodies, match_bodies;
    std::vector<PickRequests> pick_requests;
    for (const auto& prompt : prompts) {
      const std::string list = TokenList(prompt, size);
      pick_bodies.push_back(std::string("{\"model\":\"") + kModel + "\",\"prompt\":" + list +
                            ",\"max_tokens\":1}");
      pick_requests.push_back(BuildPickRequests(pick_bodies.back()));
      match_bodies.push_back(std::string("{\"model\":\"") + kModel + "\",\"tokens\":" + list + "}");
    }
    // The pick is a real one: the worker with the best tier-weighted prefix.
    {
      PickClient client(check_channel);
      for (size_t q = 0; q < prompts.size(); ++q) {
        auto pick = client.Pick(pick_bodies[q]);
        auto match =
            index->MatchTokens(kModel, std::span<const uint32_t>(prompts[q].data(), size), "", "");
        if (!pick.ok() || !match.ok()) {
          std::fprintf(stderr, "kvindex-bench epp: %s\n",
                       (!pick.ok() ? pick.status() : match.status()).ToString().c_str());
          return 1;
        }
        double best = 0, picked = 0;
        for (const auto& w : match->workers) {
          const double score = w.device + 0.8 * w.host + 0.5 * w.disk + 0.3 * w.external;
          best = std::max(best, score);
          if (w.source.worker == WorkerOfEndpoint(pick->endpoint)) picked = score;
        }
        ++checked;
        wrong_picks += best == 0 || picked != best;
      }
    }
    for (const uint32_t streams : o.streams) {
      Cell cell;
      cell.tokens = size;
      cell.streams = streams;
      Sampled picks;
      const double cpu_before = ProcessCpuSeconds();
      if (o.client == "threads") {
        picks = RunClients(streams, seconds, [&](uint32_t t) {
          auto client = std::make_shared<PickClient>(channels[t % channels.size()]);
          return [&, client](size_t i, std::vector<double>* latency, std::vector<double>* whole) {
            auto pick = client->Pick(pick_bodies[i % pick_bodies.size()]);
            if (!pick.ok()) return false;
            latency->push_back(pick->latency_s);
            whole->push_back(pick->stream_s);
            return true;
          };
        });
      } else {
        // The gateways: callback-API streams, no thread per stream.
        PickLoop loop(channels, &pick_requests, streams);
        const auto start = Clock::now();
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
        PickLoop::Result r = loop.Stop();
        const double wall = std::chrono::duration<double>(Clock::now() - start).count();
        picks.errors = r.errors;
        picks.per_s = static_cast<double>(r.latency_s.size()) / wall;
        picks.p50_ms = Percentile(r.latency_s, 0.50) * 1e3;
        picks.p99_ms = Percentile(r.latency_s, 0.99) * 1e3;
        picks.other_p50_ms = Percentile(std::move(r.stream_s), 0.50) * 1e3;
      }
      const double cpu_after = ProcessCpuSeconds();
      Sampled matches;
      if (o.http)
        matches = RunClients(streams, seconds, [&](uint32_t) {
          auto client = std::make_shared<MatchClient>(static_cast<uint16_t>(server.port()));
          return [&, client](size_t i, std::vector<double>* latency, std::vector<double>*) {
            const auto t0 = Clock::now();
            auto status = client->Post(match_bodies[i % match_bodies.size()]);
            if (!status.ok() || *status != 200) return false;
            latency->push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            return true;
          };
        });
      cell.picks_per_s = picks.per_s;
      cell.pick_p50_ms = picks.p50_ms;
      cell.pick_p99_ms = picks.p99_ms;
      cell.stream_p50_ms = picks.other_p50_ms;
      cell.cpu_us_per_pick =
          picks.per_s > 0 ? (cpu_after - cpu_before) * 1e6 / (picks.per_s * seconds) : 0;
      cell.pick_errors = picks.errors;
      cell.match_per_s = matches.per_s;
      cell.match_p50_ms = matches.p50_ms;
      cell.match_p99_ms = matches.p99_ms;
      cell.match_errors = matches.errors;
      cells.push_back(cell);
      if (!o.json) {
        std::printf(
            "%6u tokens %3u streams: picks %8.0f/s p50 %6.3f ms p99 %6.3f ms (stream p50 %6.3f "
            "ms, %.0f us CPU/pick, %llu errors) | /v1/match %8.0f/s p50 %6.3f ms p99 %6.3f ms "
            "(%llu "
            "errors)\n",
            size, streams, cell.picks_per_s, cell.pick_p50_ms, cell.pick_p99_ms, cell.stream_p50_ms,
            cell.cpu_us_per_pick, static_cast<unsigned long long>(cell.pick_errors),
            cell.match_per_s, cell.match_p50_ms, cell.match_p99_ms,
            static_cast<unsigned long long>(cell.match_errors));
        std::fflush(stdout);
      }
    }
  }
  server.Stop();
  picker.Stop();
  checker.Stop();

  // Headline figures: throughput at 1k tokens (the best stream count),
  // latency at 8k tokens on one stream (a pick's own cost, not queueing).
  auto find = [&](uint32_t tokens, uint32_t streams) -> const Cell* {
    for (const Cell& c : cells) {
      if (c.tokens == tokens && c.streams == streams) return &c;
    }
    return nullptr;
  };
  double picks_1k = 0;
  for (const Cell& c : cells) {
    if (c.tokens == 1024) picks_1k = std::max(picks_1k, c.picks_per_s);
  }
  const Cell* at8k = find(8192, 1);
  uint64_t errors = 0;
  for (const Cell& c : cells) errors += c.pick_errors + c.match_errors;
  const bool met = picks_1k >= 10000 && at8k != nullptr && at8k->pick_p99_ms <= 1.0 &&
                   errors == 0 && wrong_picks == 0;
  if (o.json) {
    nlohmann::json j = {
        {"entries", total_entries},
        {"workers", o.workers},
        {"block_size", o.block_size},
        {"build_seconds", build_s},
        {"channels", o.channels},
        {"client", o.client},
        {"speculative_ttl_ms", o.speculative_ttl_ms},
        {"seconds_per_cell", seconds},
        {"picks_checked", checked},
        {"wrong_picks", wrong_picks},
        {"errors", errors},
        {"picks_per_s_1k", picks_1k},
        {"pick_p50_ms_8k", at8k ? at8k->pick_p50_ms : 0.0},
        {"pick_p99_ms_8k", at8k ? at8k->pick_p99_ms : 0.0},
        {"http_match_p99_ms_8k", at8k ? at8k->match_p99_ms : 0.0},
        {"http_match_p50_ms_8k", at8k ? at8k->match_p50_ms : 0.0},
        {"target", {{"picks_per_s_1k", 10000}, {"pick_p99_ms_8k", 1.0}, {"met", met}}},
    };
    nlohmann::json rows = nlohmann::json::array();
    for (const Cell& c : cells) {
      rows.push_back({{"tokens", c.tokens},
                      {"streams", c.streams},
                      {"picks_per_s", c.picks_per_s},
                      {"pick_p50_ms", c.pick_p50_ms},
                      {"pick_p99_ms", c.pick_p99_ms},
                      {"stream_p50_ms", c.stream_p50_ms},
                      {"cpu_us_per_pick", c.cpu_us_per_pick},
                      {"pick_errors", c.pick_errors},
                      {"http_match_per_s", c.match_per_s},
                      {"http_match_p50_ms", c.match_p50_ms},
                      {"http_match_p99_ms", c.match_p99_ms},
                      {"http_match_errors", c.match_errors}});
    }
    j["cells"] = rows;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("picks checked against the index: %llu, wrong: %llu\n",
                static_cast<unsigned long long>(checked),
                static_cast<unsigned long long>(wrong_picks));
    std::printf(
        "picks/s at 1k tokens %.0f (target >= 10000); pick p50 / p99 at 8k tokens, one "
        "stream %.3f / %.3f ms (target p99 <= 1 ms); /v1/match p99 %.3f ms: %s\n",
        picks_1k, at8k ? at8k->pick_p50_ms : 0.0, at8k ? at8k->pick_p99_ms : 0.0,
        at8k ? at8k->match_p99_ms : 0.0, met ? "met" : "NOT met");
  }
  return errors == 0 && wrong_picks == 0 ? 0 : 1;
}

}  // namespace kvindex::bench
