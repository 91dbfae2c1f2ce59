#include "services/bench/http/http_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "services/bench/http/synthetic_index.h"
#include "services/bench/http/wrk_output.h"
#include "shared/compat/sglang_indexer.h"
#include "shared/config/cli.h"
#include "shared/consume/apply_loop.h"
#include "shared/consume/in_process_log_reader.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/http/client.h"
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
  uint32_t query_blocks = 64;
  uint32_t replicas = 8;  // workers holding (part of) each prompt
  uint32_t queries = 256;
  std::string duration = "10s";
  uint32_t connections = 16;
  uint32_t wrk_threads = 1;
  uint32_t http_threads = 0;  // civetweb worker threads; 0 = connections + 4
  uint32_t io_threads = 2;    // event-loop I/O threads
  uint32_t idle_connections = 1000;
  uint32_t probes = 2000;
  std::string server = "both";
  uint64_t seed = 42;
  std::string wrk = "wrk";
  bool json = false;
};

struct Figures {
  double ops_per_second = 0, p50_us = 0, p99_us = 0;
};

Figures Summarize(std::vector<double>& latencies_s, double wall_s) {
  Figures f;
  if (latencies_s.empty()) return f;
  f.ops_per_second = static_cast<double>(latencies_s.size()) / wall_s;
  auto at = [&](double q) {
    const size_t k = std::min(latencies_s.size() - 1,
                              static_cast<size_t>(q * static_cast<double>(latencies_s.size())));
    std::nth_element(latencies_s.begin(), latencies_s.begin() + static_cast<long>(k),
                     latencies_s.end());
    return latencies_s[k] * 1e6;
  };
  f.p50_us = at(0.50);
  f.p99_us = at(0.99);
  return f;
}

// Runs fn(i) repeatedly for about `seconds`, timing each call.
template <typename F>
Figures Measure(double seconds, F&& fn) {
  std::vector<double> latencies;
  latencies.reserve(1 << 20);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  for (size_t i = 0;; ++i) {
    const auto t0 = Clock::now();
    fn(i);
    const auto t1 = Clock::now();
    latencies.push_back(std::chrono::duration<double>(t1 - t0).count());
    if ((i & 255) == 0 && t1 >= end) break;
  }
  return Summarize(latencies, std::chrono::duration<double>(Clock::now() - start).count());
}

std::string MatchBody(const std::vector<uint32_t>& tokens) {
  std::string body = std::string("{\"model\":\"") + kModel + "\",\"tokens\":[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i != 0) body.push_back(',');
    body += std::to_string(tokens[i]);
  }
  body += "]}";
  return body;
}

// The compatibility APIs' bodies for the same prompt (docs/compat.md).
template <typename T>
std::string NumberArray(const std::vector<T>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out.push_back(',');
    out += std::to_string(values[i]);
  }
  return out + "]";
}

struct CompatBodies {
  std::string mooncake_query, mooncake_query_by_hash, dynamo_tiered;
  std::string sglang_match_prefix;  // serialized protobuf
};

CompatBodies MakeCompatBodies(const std::vector<uint32_t>& tokens, uint32_t block_size) {
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(tokens, block_size, hashing::LocalHashSeed("", ""), &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  std::vector<int64_t> dynamo(local.begin(), local.end());  // Dynamo sends i64
  CompatBodies b;
  b.mooncake_query = std::string("{\"model\":\"") + kModel +
                     "\",\"token_ids\":" + NumberArray(tokens) +
                     ",\"block_size\":" + std::to_string(block_size) + "}";
  b.mooncake_query_by_hash = std::string("{\"model\":\"") + kModel +
                             "\",\"seq_hashes\":" + NumberArray(seq) +
                             ",\"block_size\":" + std::to_string(block_size) + "}";
  compat::pb::MatchExternalKvPrefixRequest sglang;  // SGLang sends our hashes as sfixed64
  for (uint64_t hash : seq) sglang.add_hashes(static_cast<int64_t>(hash));
  b.sglang_match_prefix = sglang.SerializeAsString();
  b.dynamo_tiered = std::string("{\"block_hashes\":") + NumberArray(dynamo) + ",\"model_name\":\"" +
                    kModel + "\",\"routing_group\":\"\"}";
  return b;
}

std::string WriteLuaScript(const std::vector<std::string>& bodies) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvindex-bench-http-" + std::to_string(::getpid()) + ".lua"))
                               .string();
  std::ofstream out(path);
  out << "-- generated by kvindex-bench http: POST /v1/match, cycling through bodies\n"
      << "local bodies = {\n";
  for (const std::string& body : bodies) out << "[[" << body << "]],\n";
  out << "}\n"
      << "local requests = {}\n"
      << "local i = 0\n"
      << "function init(args)\n"
      << "  wrk.method = \"POST\"\n"
      << "  wrk.headers[\"Content-Type\"] = \"application/json\"\n"
      << "  for k, body in ipairs(bodies) do\n"
      << "    requests[k] = wrk.format(\"POST\", \"/v1/match\", wrk.headers, body)\n"
      << "  end\n"
      << "end\n"
      << "function request()\n"
      << "  i = i + 1\n"
      << "  if i > #requests then i = 1 end\n"
      << "  return requests[i]\n"
      << "end\n";
  return path;
}

std::string RunCommand(const std::string& command, int* exit_code) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *exit_code = -1;
    return output;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  *exit_code = ::pclose(pipe);
  return output;
}

struct Probes {
  uint32_t probes = 0;
  uint64_t failures = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
};

struct HttpRun {
  std::string name;
  uint32_t threads = 0;
  WrkReport wrk;
  Probes healthz;
  bool probed = false;
};

int ConnectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Holds `idle` connections open (connected, nothing sent) and times `probes`
// GET /healthz, each on a new connection.
Probes ProbeWithIdleConnections(uint16_t port, uint32_t idle, uint32_t probes) {
  std::vector<int> held;
  for (uint32_t i = 0; i < idle; ++i) {
    const int fd = ConnectLoopback(port);
    if (fd >= 0) held.push_back(fd);
  }
  Probes result;
  std::vector<double> latencies;
  for (uint32_t i = 0; i < probes; ++i) {
    http::ClientRequest probe;
    probe.method = "GET";
    probe.url.host = "127.0.0.1";
    probe.url.port = port;
    probe.path = "/healthz";
    const auto t0 = Clock::now();
    auto reply = http::Fetch(probe);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!reply.ok() || reply->status != 200) ++result.failures;
    latencies.push_back(seconds);
  }
  for (int fd : held) ::close(fd);
  result.probes = probes;
  if (!latencies.empty()) {
    result.max_us = *std::max_element(latencies.begin(), latencies.end()) * 1e6;
    Figures f = Summarize(latencies, 1.0);
    result.p50_us = f.p50_us;
    result.p99_us = f.p99_us;
  }
  return result;
}

bool SanityCheck(uint16_t port, const std::string& body) {
  http::ClientRequest check;
  check.method = "POST";
  check.url.host = "127.0.0.1";
  check.url.port = port;
  check.path = "/v1/match";
  check.body = body;
  auto reply = http::Fetch(check);
  if (!reply.ok() || reply->status != 200 || reply->body.find("\"longest\"") == std::string::npos) {
    std::fprintf(stderr, "kvindex-bench http: sanity request failed: %s\n",
                 reply.ok() ? reply->body.c_str() : reply.status().ToString().c_str());
    return false;
  }
  return true;
}

}  // namespace

int RunHttpBench(int argc, char** argv) {
  Options o;
  CLI::App app{"kvindex-bench http: /v1/match over HTTP next to the in-process lookup",
               "kvindex-bench http"};
  app.add_option("--entries", o.entries, "(source, block) entries to build")->capture_default_str();
  app.add_option("--workers", o.workers, "Sources (workers) in the index")->capture_default_str();
  app.add_option("--block-size", o.block_size, "Tokens per block")->capture_default_str();
  app.add_option("--query-blocks", o.query_blocks, "Blocks per query (and per prompt)")
      ->capture_default_str();
  app.add_option("--replicas", o.replicas, "Workers holding each prompt")->capture_default_str();
  app.add_option("--queries", o.queries, "Distinct query bodies")->capture_default_str();
  app.add_option("--duration", o.duration, "wrk duration (and in-process run time)")
      ->capture_default_str();
  app.add_option("--connections", o.connections, "wrk connections")->capture_default_str();
  app.add_option("--wrk-threads", o.wrk_threads, "wrk threads")->capture_default_str();
  app.add_option("--http-threads", o.http_threads, "civetweb server threads (0 = connections + 4)")
      ->capture_default_str();
  app.add_option("--io-threads", o.io_threads, "Event-loop server I/O threads")
      ->capture_default_str();
  app.add_option("--idle-connections", o.idle_connections,
                 "Idle connections held open while /healthz is probed (event loop)")
      ->capture_default_str();
  app.add_option("--probes", o.probes, "/healthz probes with the idle connections held")
      ->capture_default_str();
  app.add_option("--server", o.server, "Servers to measure")
      ->check(CLI::IsMember({"both", "event-loop", "civetweb"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Workload seed")->capture_default_str();
  app.add_option("--wrk", o.wrk, "wrk executable")->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON object");
  if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
  auto duration = config::ParseDuration(o.duration);
  if (!duration.ok() || duration->count() <= 0) {
    std::fprintf(stderr, "kvindex-bench http: bad --duration '%s'\n", o.duration.c_str());
    return 2;
  }
  if (o.workers == 0 || o.block_size == 0 || o.query_blocks < 4 || o.queries == 0 ||
      o.connections == 0 || o.wrk_threads == 0 || o.wrk_threads > o.connections) {
    std::fprintf(stderr,
                 "kvindex-bench http: need workers, block-size, queries, connections > 0, "
                 "query-blocks >= 4, 0 < wrk-threads <= connections\n");
    return 2;
  }
  const double seconds = static_cast<double>(duration->count()) / 1000.0;
  const uint32_t http_threads = o.http_threads != 0 ? o.http_threads : o.connections + 4;

  // 1. Build.
  auto index = std::make_unique<index::KvIndex>();
  const auto build_start = Clock::now();
  const auto prompts = BuildSyntheticIndex({.model = kModel,
                                            .entries = o.entries,
                                            .workers = o.workers,
                                            .block_size = o.block_size,
                                            .prompt_blocks = o.query_blocks,
                                            .replicas = o.replicas,
                                            .queries = o.queries,
                                            .max_shared_blocks = 16,
                                            .seed = o.seed},
                                           index.get());
  const double build_s = std::chrono::duration<double>(Clock::now() - build_start).count();
  const index::IndexStats stats = index->Stats();
  uint64_t total_entries = 0;
  for (uint64_t e : stats.entries) total_entries += e;
  if (!o.json) {
    std::printf("index: %llu entries over %u workers (%llu bytes, %.1f B/entry), built in %.1f s\n",
                static_cast<unsigned long long>(total_entries), o.workers,
                static_cast<unsigned long long>(stats.bytes_allocated),
                total_entries ? static_cast<double>(stats.bytes_allocated) / total_entries : 0.0,
                build_s);
    std::fflush(stdout);
  }

  std::vector<std::string> bodies;
  for (const auto& tokens : prompts) bodies.push_back(MatchBody(tokens));

  // 2. In-process: the index lookup alone.
  uint64_t matched = 0;
  double lookup_calls = 0;
  Figures lookup = Measure(std::min(seconds, 5.0), [&](size_t i) {
    lookup_calls += 1;
    auto result = index->MatchTokens(kModel, prompts[i % prompts.size()], "", "");
    matched += result.ok() ? result->workers.size() : 0;
  });

  // 3. In-process: the /v1/match handler (parse + lookup + JSON write).
  InProcessSink sink;
  consume::InProcessLogReader reader(&sink);
  consume::ApplyLoop loop(&reader, index.get(), nullptr, {});  // not started: nothing to apply
  query::ApiContext context;
  context.index = index.get();
  context.apply = &loop;
  query::RouterApi api({}, context);
  std::vector<std::string> padded;
  for (const auto& body : bodies) padded.push_back(body + std::string(http::kBodyPadding, '\0'));
  size_t bad = 0;
  size_t response_bytes = 0, responses = 0;
  Figures handler = Measure(std::min(seconds, 5.0), [&](size_t i) {
    http::Request request;
    request.method = "POST";
    request.path = "/v1/match";
    const std::string& body = padded[i % padded.size()];
    request.body = std::string_view(body.data(), body.size() - http::kBodyPadding);
    http::Response response;
    api.Match(request, response);
    bad += response.status != 200;
    response_bytes += response.body.size();
    ++responses;
  });

  // 3b. In-process: each compatibility API's handler (parse + the same lookup
  // + its own JSON) on the same prompts, beside /v1/match's (docs/compat.md;
  // target: within 1.2x of /v1/match). Rounds alternate the handlers so
  // machine noise lands on all of them alike.
  // SGLang's KvIndexer is gRPC: its codec is the protobuf request parsed,
  // the lookup, the response serialized (the gRPC transport, like the HTTP
  // server for the others, is outside the handler).
  const query::CompatApi& compat = api.compat();
  compat::SglangOptions sglang_options;
  sglang_options.model = kModel;
  sglang_options.address = [](const SourceKey&) { return std::string("http://10.0.0.1:30000"); };
  compat::SglangIndexer sglang(&context, std::move(sglang_options));
  auto http_handler = [&](void (query::CompatApi::*handler)(const http::Request&, http::Response&)
                              const) {
    return [&compat, handler](const http::Request& rq, http::Response& rs) {
      (compat.*handler)(rq, rs);
    };
  };
  struct CompatRun {
    const char* name;
    std::vector<std::string> bodies;
    std::function<void(const http::Request&, http::Response&)> handler;
    std::vector<double> latencies;
    size_t bad = 0;
  };
  std::vector<CompatRun> compat_runs = {
      {"POST /query (Mooncake)", {}, http_handler(&query::CompatApi::MooncakeQuery), {}, 0},
      {"POST /query_by_hash (Mooncake)",
       {},
       http_handler(&query::CompatApi::MooncakeQueryByHash),
       {},
       0},
      {"POST /query_tiered_by_hash (Dynamo)",
       {},
       http_handler(&query::CompatApi::QueryTieredByHash),
       {},
       0},
      {"MatchExternalKvPrefix (SGLang gRPC)",
       {},
       [&sglang](const http::Request& rq, http::Response& rs) {
         compat::pb::MatchExternalKvPrefixRequest request;
         compat::pb::MatchExternalKvPrefixResponse response;
         const bool parsed =
             request.ParseFromArray(rq.body.data(), static_cast<int>(rq.body.size()));
         const bool ok = parsed && sglang.MatchPrefix(request, &response).ok();
         rs.body = response.SerializeAsString();
         rs.status =
             ok && response.matches_size() > 0 ? 200 : 500;  // an empty answer counts as bad
       },
       {},
       0}};
  for (const auto& tokens : prompts) {
    CompatBodies b = MakeCompatBodies(tokens, o.block_size);
    const std::string pad(http::kBodyPadding, '\0');
    compat_runs[0].bodies.push_back(b.mooncake_query + pad);
    compat_runs[1].bodies.push_back(b.mooncake_query_by_hash + pad);
    compat_runs[2].bodies.push_back(b.dynamo_tiered + pad);
    compat_runs[3].bodies.push_back(b.sglang_match_prefix + pad);
  }
  std::vector<double> match_latencies;
  auto time_call = [&](const std::string& body, auto&& call) {
    http::Request request;
    request.method = "POST";
    request.body = std::string_view(body.data(), body.size() - http::kBodyPadding);
    http::Response response;
    const auto t0 = Clock::now();
    call(request, response);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return std::pair<double, bool>(s, response.status == 200);
  };
  const auto compat_end = Clock::now() + std::chrono::duration<double>(std::min(seconds, 5.0));
  for (size_t i = 0; Clock::now() < compat_end; ++i) {
    for (size_t k = 0; k < 256; ++k) {
      const size_t q = (i * 256 + k) % padded.size();
      auto [s0, ok0] = time_call(
          padded[q], [&](const http::Request& rq, http::Response& rs) { api.Match(rq, rs); });
      match_latencies.push_back(s0);
      bad += !ok0;
      for (CompatRun& run : compat_runs) {
        auto [s1, ok1] = time_call(run.bodies[q], run.handler);
        run.latencies.push_back(s1);
        run.bad += !ok1;
      }
    }
  }
  const double compat_wall = std::min(seconds, 5.0);
  const Figures match_beside = Summarize(match_latencies, compat_wall);
  std::vector<Figures> compat_figures;
  bool compat_met = true;
  for (CompatRun& run : compat_runs) {
    compat_figures.push_back(Summarize(run.latencies, compat_wall));
    bad += run.bad;
    compat_met = compat_met && compat_figures.back().p50_us <= 1.2 * match_beside.p50_us;
  }

  // 4. Over HTTP with wrk: the event-loop server and the former civetweb
  // one in the same run, same handler, same bodies.
  const std::string script = WriteLuaScript(bodies);
  std::vector<HttpRun> runs;
  for (const http::Backend backend :
       {http::Backend::kEventLoop, http::Backend::kThreadPerConnection}) {
    const bool event_loop = backend == http::Backend::kEventLoop;
    if (o.server != "both" && (o.server == "event-loop") != event_loop) continue;
    http::ServerOptions server_options;
    server_options.listen = "127.0.0.1:0";
    server_options.backend = backend;
    server_options.threads = event_loop ? o.io_threads : http_threads;
    server_options.max_connections = o.idle_connections + o.connections + 64;
    server_options.max_connections_per_client = server_options.max_connections;  // one client: wrk
    http::Server server(server_options);
    api.Register(server);
    if (Status status = server.Start(); !status.ok()) {
      std::fprintf(stderr, "kvindex-bench http: %s\n", status.ToString().c_str());
      return 1;
    }
    if (!SanityCheck(server.port(), bodies[0])) return 1;
    const std::string command =
        o.wrk + " -t" + std::to_string(o.wrk_threads) + " -c" + std::to_string(o.connections) +
        " -d" + std::to_string(std::max<int64_t>(1, duration->count() / 1000)) + "s --latency -s " +
        script + " http://127.0.0.1:" + std::to_string(server.port()) + "/v1/match 2>&1";
    int exit_code = 0;
    const std::string output = RunCommand(command, &exit_code);
    auto report = ParseWrkOutput(output);
    if (exit_code != 0 || !report.has_value()) {
      std::fprintf(stderr,
                   "kvindex-bench http: wrk failed (exit %d; is the Debian package 'wrk' "
                   "installed?):\n%s\n",
                   exit_code, output.c_str());
      std::filesystem::remove(script);
      return 1;
    }
    HttpRun run{event_loop ? "event-loop" : "civetweb", server_options.threads, *report, {}, false};
    // /healthz probes, each on a new connection (as a kubelet probes), while
    // --idle-connections connections are held open doing nothing. Only for
    // the event loop: civetweb stops answering once idle connections hold
    // all its threads (issue #11).
    if (event_loop && o.idle_connections > 0) {
      run.healthz = ProbeWithIdleConnections(server.port(), o.idle_connections, o.probes);
      run.probed = true;
    }
    server.Stop();
    runs.push_back(std::move(run));
  }
  std::filesystem::remove(script);
  const HttpRun* fresh = runs.empty() || runs[0].name != "event-loop" ? nullptr : &runs[0];
  const HttpRun* old = runs.empty() || runs.back().name != "civetweb" ? nullptr : &runs.back();
  const double speedup = fresh != nullptr && old != nullptr && old->wrk.requests_per_second > 0
                             ? fresh->wrk.requests_per_second / old->wrk.requests_per_second
                             : 0.0;
  const bool met =
      fresh != nullptr && fresh->wrk.p99_seconds <= 1e-3 && fresh->wrk.errors == 0 &&
      (old == nullptr || speedup >= 2.0) &&
      (!fresh->probed || (fresh->healthz.failures == 0 && fresh->healthz.p99_us <= 10000));

  if (o.json) {
    nlohmann::json j = {
        {"entries", total_entries},
        {"workers", o.workers},
        {"block_size", o.block_size},
        {"query_blocks", o.query_blocks},
        {"index_bytes", stats.bytes_allocated},
        {"build_seconds", build_s},
        {"in_process_lookup",
         {{"ops_per_second", lookup.ops_per_second},
          {"p50_us", lookup.p50_us},
          {"p99_us", lookup.p99_us}}},
        {"in_process_handler",
         {{"ops_per_second", handler.ops_per_second},
          {"p50_us", handler.p50_us},
          {"p99_us", handler.p99_us},
          {"non_200", bad},
          {"response_bytes_avg", responses ? response_bytes / responses : 0}}},
        {"compat_handlers",
         [&] {
           nlohmann::json c = {
               {"v1_match", {{"p50_us", match_beside.p50_us}, {"p99_us", match_beside.p99_us}}},
               {"target_ratio_p50", 1.2},
               {"met", compat_met}};
           for (size_t k = 0; k < compat_runs.size(); ++k) {
             c["apis"].push_back(
                 {{"api", compat_runs[k].name},
                  {"p50_us", compat_figures[k].p50_us},
                  {"p99_us", compat_figures[k].p99_us},
                  {"ratio_p50", compat_figures[k].p50_us / std::max(1e-9, match_beside.p50_us)},
                  {"non_200", compat_runs[k].bad}});
           }
           return c;
         }()},
        {"workers_matched_avg", static_cast<double>(matched) / std::max<double>(1.0, lookup_calls)},
        {"target",
         {{"speedup_over_civetweb", 2.0},
          {"p99_us", 1000},
          {"healthz_p99_us", 10000},
          {"met", met}}},
        {"speedup_over_civetweb", speedup},
    };
    for (const HttpRun& run : runs) {
      nlohmann::json r = {{"requests_per_second", run.wrk.requests_per_second},
                          {"p50_us", run.wrk.p50_seconds * 1e6},
                          {"p90_us", run.wrk.p90_seconds * 1e6},
                          {"p99_us", run.wrk.p99_seconds * 1e6},
                          {"requests", run.wrk.requests},
                          {"errors", run.wrk.errors},
                          {"connections", o.connections},
                          {"wrk_threads", o.wrk_threads},
                          {"server_threads", run.threads}};
      if (run.probed) {
        r["healthz_with_idle"] = {
            {"idle_connections", o.idle_connections}, {"probes", run.healthz.probes},
            {"failures", run.healthz.failures},       {"p50_us", run.healthz.p50_us},
            {"p99_us", run.healthz.p99_us},           {"max_us", run.healthz.max_us}};
      }
      j["http_" + std::string(run.name == "event-loop" ? "event_loop" : "civetweb")] = r;
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "queries: %u distinct bodies of %u blocks (%u tokens, ~%zu bytes each); "
        "%.1f workers matched and %zu response bytes on average\n",
        o.queries, o.query_blocks, o.query_blocks * o.block_size, bodies[0].size(),
        static_cast<double>(matched) / std::max<double>(1.0, lookup_calls),
        responses ? response_bytes / responses : 0);
    std::printf("%-34s %12s %10s %10s\n", "measure", "ops/s", "p50", "p99");
    std::printf("%-34s %12.0f %8.2fus %8.2fus\n", "in-process lookup (1 thread)",
                lookup.ops_per_second, lookup.p50_us, lookup.p99_us);
    std::printf("%-34s %12.0f %8.2fus %8.2fus\n", "in-process /v1/match handler",
                handler.ops_per_second, handler.p50_us, handler.p99_us);
    std::printf("%-34s %12s %8.2fus %8.2fus  (interleaved with the APIs below)\n",
                "in-process /v1/match, beside", "", match_beside.p50_us, match_beside.p99_us);
    for (size_t k = 0; k < compat_runs.size(); ++k) {
      std::printf("%-34s %12s %8.2fus %8.2fus  (%.2fx /v1/match p50)\n", compat_runs[k].name, "",
                  compat_figures[k].p50_us, compat_figures[k].p99_us,
                  compat_figures[k].p50_us / std::max(1e-9, match_beside.p50_us));
    }
    std::printf("compatibility APIs within 1.2x of /v1/match (p50): %s\n",
                compat_met ? "met" : "NOT met");
    for (const HttpRun& run : runs) {
      std::printf("%-34s %12.0f %8.2fus %8.2fus  (wrk -t%u -c%u, %u server threads, %llu errors)\n",
                  ("HTTP /v1/match, " + run.name).c_str(), run.wrk.requests_per_second,
                  run.wrk.p50_seconds * 1e6, run.wrk.p99_seconds * 1e6, o.wrk_threads,
                  o.connections, run.threads, static_cast<unsigned long long>(run.wrk.errors));
      if (run.probed) {
        std::printf(
            "%-34s %12s %8.2fus %8.2fus  (%u probes on new connections, %llu failed, "
            "max %.0f us)\n",
            ("/healthz, " + std::to_string(o.idle_connections) + " idle conns").c_str(), "",
            run.healthz.p50_us, run.healthz.p99_us, run.healthz.probes,
            static_cast<unsigned long long>(run.healthz.failures), run.healthz.max_us);
      }
    }
    if (speedup > 0) std::printf("event loop / civetweb throughput: %.2fx\n", speedup);
    std::printf(
        "target: >= 2x civetweb, p99 <= 1 ms, /healthz p99 <= 10 ms with idle "
        "connections: %s\n",
        met ? "met" : "NOT met");
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace kvindex::bench
