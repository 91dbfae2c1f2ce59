// kvindex-mockengine: a simulated inference cluster. Engines replay a
// Mooncake request trace and publish the KV events real vLLM / SGLang /
// TensorRT-LLM workers would, on real ZMQ sockets (PUB + replay ROUTER per
// worker and dp rank); requests are placed by a policy (kv-aware asks a
// router's /v1/match, epp goes through its endpoint picker to the engines'
// own OpenAI servers); the ground truth, a routing report and fault knobs
// make it the end-to-end check of kvindex. See README.md.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "services/mockengine/cluster.h"
#include "services/mockengine/prompt_tokens.h"
#include "services/mockengine/truth_http.h"
#include "shared/config/cli.h"
#include "shared/log/log.h"
#include "shared/trace/mooncake_trace.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Flags {
  std::string trace;
  int workers = 4;
  std::string wire = "vllm-map";
  size_t device_capacity = 16384;
  size_t host_capacity = 0;
  size_t disk_capacity = 0;
  uint32_t dp_ranks = 1;
  double speed = 1.0;
  uint32_t max_running = 0;
  std::string cpu_events = "placeholder";
  std::vector<std::string> models{"demo-model"};
  std::vector<std::string> engines;
  std::string policy = "round-robin";
  std::string fault[kvindex::mockengine::kNumFaultKinds];
  size_t limit = 0;
  std::string start_delay = "500ms";
  bool exit_when_done = false;
  int print_prompt = -1;
  bool print_sources = false;
  std::string truth_http, truth_out, report_out, requests_out;
};

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "kvindex-mockengine: error: %s\n", message.c_str());
  return code;
}

bool WriteFile(const std::string& path, const std::string& content) {
  if (path.empty()) return true;
  std::ofstream out(path, std::ios::trunc);
  out << content << "\n";
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvindex::mockengine;
  CLI::App app{
      "kvindex-mockengine: a simulated inference cluster publishing real KV-event wire traffic "
      "(ZMQ PUB + replay ROUTER per worker and rank) from a Mooncake trace, with placement "
      "policies, ground truth and fault knobs",
      "kvindex-mockengine"};
  Flags f;
  ClusterOptions o;
  kvindex::config::CommonOptions common;
  kvindex::config::AddCommonOptions(app, &common);
  app.add_option("--trace", f.trace, "Mooncake trace (JSON lines with hash_ids)")->required();
  app.add_option("--workers", f.workers, "Number of simulated workers")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--worker-prefix", o.worker_prefix, "Worker ids: PREFIX0..PREFIX{N-1}")
      ->capture_default_str();
  app.add_option("--host", o.host, "Address the engines bind")->capture_default_str();
  app.add_option("--pub-base-port", o.pub_base_port,
                 "PUB port of source 0; (worker, rank) pairs in order take the next ports")
      ->capture_default_str();
  app.add_option("--replay-base-port", o.replay_base_port,
                 "Replay ROUTER port of source 0 (likewise); 0 = no replay")
      ->capture_default_str();
  app.add_option("--wire", f.wire, "Wire form: vllm-map, vllm-array, sglang or trtllm")
      ->check(CLI::IsMember({"vllm-map", "vllm-array", "sglang", "trtllm"}))
      ->capture_default_str();
  app.add_option("--topic", o.topic, "ZMQ topic frame")->capture_default_str();
  app.add_option("--block-size", o.block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--device-capacity", f.device_capacity, "GPU blocks per engine (rank)")
      ->capture_default_str();
  app.add_option("--host-capacity", f.host_capacity, "CPU offload blocks per engine (0 = none)")
      ->capture_default_str();
  app.add_option("--disk-capacity", f.disk_capacity, "Disk offload blocks per engine (0 = none)")
      ->capture_default_str();
  app.add_option("--dp-ranks", f.dp_ranks, "Data-parallel ranks per worker")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--speed", f.speed, "Speed factor of the engines (service time / F)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-running", f.max_running,
                 "Requests an engine (rank) runs at once, as vLLM's max_num_seqs; later ones "
                 "wait in its queue (0 = no limit)")
      ->capture_default_str();
  app.add_option("--cpu-events", f.cpu_events,
                 "Offload stores: placeholder (engine hash only) or tokens (self-describing)")
      ->check(CLI::IsMember({"placeholder", "tokens"}))
      ->capture_default_str();
  app.add_option("--model", f.models, "Model served (repeatable): worker i serves model i % M")
      ->capture_default_str();
  app.add_option("--engine", f.engines,
                 "Per-worker override (repeatable): 'index=I,wire=W,device=N,host=N,disk=N,"
                 "dp_ranks=N,speed=F,max_running=N,model=NAME,cpu_events=placeholder|tokens'");
  app.add_option("--policy", f.policy,
                 "Placement: round-robin, kv-aware, random, least-loaded, epp")
      ->check(CLI::IsMember({"round-robin", "kv-aware", "random", "least-loaded", "epp"}))
      ->capture_default_str();
  app.add_option("--router", o.router_url, "kv-aware: router base URL for POST /v1/match");
  app.add_option("--epp", o.epp_address,
                 "epp: the router's ext_proc endpoint picker (kvindex-router --epp), host:port");
  app.add_option("--engine-http-base-port", o.engine_http_base_port,
                 "Worker i serves its OpenAI API and /metrics on --host:(PORT + i); its "
                 "--print-sources string gains endpoint= (0 = none)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--kv-load-weight", o.kv_load_weight,
                 "kv-aware: cost of one in-flight request, in prompts (0 = matched blocks only)")
      ->capture_default_str();
  app.add_option("--prefill-us-per-token", o.load.prefill_us_per_token,
                 "Load model: prefill time per uncached prompt token (us)")
      ->capture_default_str();
  app.add_option("--decode-us-per-token", o.load.decode_us_per_token,
                 "Load model: decode time per output token (us)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of random placement and fault positions")
      ->capture_default_str();
  for (int k = 0; k < kNumFaultKinds; ++k) {
    const std::string name(FaultKindName(static_cast<FaultKind>(k)));
    app.add_option("--fault-" + name, f.fault[k],
                   "Inject '" + name + "' faults: a count (3) or a rate (0.5% or 0.005)");
  }
  std::string fault_min_interval = "2s";
  app.add_option("--fault-min-interval", fault_min_interval,
                 "Least wall time between loss faults (drop, gap, slow) on one source, after "
                 "the agent's replay (its replay cooldown would turn a drop into a clear)")
      ->capture_default_str();
  app.add_option("--rate", o.rate, "Requests per second, wall clock (0 = unthrottled)")
      ->capture_default_str();
  app.add_option("--limit", f.limit, "Requests to replay (0 = the whole trace)")
      ->capture_default_str();
  app.add_option("--start-delay", f.start_delay, "Wait before the first request")
      ->capture_default_str();
  app.add_flag("--exit-when-done", f.exit_when_done,
               "Exit after the trace instead of serving replay and HTTP until SIGINT/SIGTERM");
  app.add_option("--print-prompt", f.print_prompt,
                 "Print request N's prompt token ids as a JSON array and exit");
  app.add_flag("--print-sources", f.print_sources,
               "Print one kvindex-router --source string per worker and exit");
  app.add_flag("--dry-run", o.dry_run,
               "No sockets: simulate the whole trace at once, write the files, exit");
  app.add_option("--truth-http", f.truth_http, "Serve /v1/truth, /v1/match, /v1/progress on ADDR");
  app.add_option("--truth-out", f.truth_out, "Write the ground truth JSON here at exit");
  app.add_option("--report-out", f.report_out, "Write the routing report JSON here at exit");
  app.add_option("--requests-out", f.requests_out,
                 "Write one JSON line per request here at exit: where it was placed, the prefix "
                 "hit per tier, in-flight requests, the match latency");
  if (auto code = kvindex::config::Parse(app, argc, argv)) return *code;
  if (auto status = kvindex::log::Init(common.log_format, common.log_level); !status.ok()) {
    return Fail(status.ToString(), 2);
  }
  auto logger = kvindex::log::Get("mockengine");

  o.models = f.models;
  o.policy = *PolicyFromName(f.policy);
  for (int i = 0; i < f.workers; ++i) {
    o.workers.push_back(WorkerConfig{.wire = f.wire,
                                     .device = f.device_capacity,
                                     .host = f.host_capacity,
                                     .disk = f.disk_capacity,
                                     .dp_ranks = f.dp_ranks,
                                     .speed = f.speed,
                                     .max_running = f.max_running,
                                     .model = o.models[static_cast<size_t>(i) % o.models.size()],
                                     .cpu_events_tokens = f.cpu_events == "tokens"});
  }
  for (const std::string& e : f.engines) {
    if (auto status = ApplyEngineOverride(e, &o); !status.ok()) {
      return Fail(std::string(status.message()), 2);
    }
  }
  for (int k = 0; k < kNumFaultKinds; ++k) {
    auto spec = ParseFaultSpec(f.fault[k]);
    if (!spec.ok()) {
      return Fail("--fault-" + std::string(FaultKindName(static_cast<FaultKind>(k))) + ": " +
                      std::string(spec.status().message()),
                  2);
    }
    o.faults[k] = *spec;
  }
  if (o.dry_run && (o.policy == Policy::kKvAware || o.policy == Policy::kEpp)) {
    return Fail("--policy " + f.policy + " needs a router; --dry-run runs without one", 2);
  }
  if (auto status = Validate(o); !status.ok()) return Fail(std::string(status.message()), 2);
  if (f.print_sources) {
    for (const std::string& s : SourceStrings(o)) std::printf("%s\n", s.c_str());
    return 0;
  }
  auto min_interval = kvindex::config::ParseDuration(fault_min_interval);
  if (!min_interval.ok()) {
    return Fail("--fault-min-interval: " + std::string(min_interval.status().message()), 2);
  }
  o.fault_min_interval = *min_interval;
  auto delay = kvindex::config::ParseDuration(f.start_delay);
  if (!delay.ok()) return Fail("--start-delay: " + std::string(delay.status().message()), 2);

  const size_t wanted = f.print_prompt >= 0 ? static_cast<size_t>(f.print_prompt) + 1 : f.limit;
  auto requests = kvindex::trace::ReadTrace(f.trace, wanted);
  if (!requests.ok()) return Fail(requests.status().ToString(), 1);
  if (f.print_prompt >= 0) {
    if (requests->size() <= static_cast<size_t>(f.print_prompt)) {
      return Fail("the trace has only " + std::to_string(requests->size()) + " requests", 1);
    }
    const std::vector<uint32_t> tokens = PromptTokens((*requests)[f.print_prompt]);
    std::string out = "[";
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ",";
      out += std::to_string(tokens[i]);
    }
    std::printf("%s]\n", out.c_str());
    return 0;
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const size_t total = requests->size();
  // The context outlives the cluster's sockets (zmq_ctx_term waits for them).
  zmq::context_t context(1);
  o.record_requests = !f.requests_out.empty();
  Cluster cluster(o, std::move(*requests), f.trace);
  if (!o.dry_run) {
    if (auto status = cluster.Bind(context); !status.ok()) return Fail(status.ToString(), 1);
  }
  std::optional<kvindex::http::Server> server;
  if (!f.truth_http.empty() && !o.dry_run) {
    kvindex::http::ServerOptions http_options;
    http_options.listen = f.truth_http;
    server.emplace(http_options);
    RegisterTruthHttp(cluster, *server);
    if (auto status = server->Start(); !status.ok()) return Fail(status.ToString(), 1);
    logger->info("truth API on {}", f.truth_http);
  }
  logger->info("{} workers ({} sources), policy {}, {} requests from {}{}", o.workers.size(),
               SourceStrings(o).size(), PolicyName(o.policy), total, f.trace,
               o.dry_run ? " (dry run)" : "");

  cluster.Run(g_stop, o.dry_run ? std::chrono::milliseconds(0) : *delay);
  if (!o.dry_run && !f.exit_when_done) {
    while (!g_stop.load()) cluster.ServeReplayFor(g_stop, std::chrono::seconds(1));
  }
  bool ok = WriteFile(f.truth_out, cluster.TruthJson());
  ok = WriteFile(f.report_out, cluster.ReportJson()) && ok;
  ok = WriteFile(f.requests_out, cluster.RequestsJsonl()) && ok;
  if (server) server->Stop();
  if (!ok) return Fail("cannot write --truth-out / --report-out / --requests-out", 1);
  return 0;
}
