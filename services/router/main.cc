// kvindex-router: placement log -> tiered index -> HTTP query API
// (interfaces.md, "kvindex-router"). --embedded runs the agent pipeline
// in-process (single node); --nats consumes the JetStream placement stream
// (replicated routers, docs/operations.md).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "services/router/router.h"
#include "shared/base/strings.h"
#include "shared/config/cli.h"
#include "shared/ingest/source_spec.h"
#include "shared/log/log.h"
#include "shared/nats/flags.h"

namespace {

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "kvindex-router: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvindex;
  CLI::App app{"kvindex-router: engine KV events -> tiered index -> HTTP query API",
               "kvindex-router"};
  config::CommonOptions common;
  config::AddCommonOptions(app, &common);

  router::RouterOptions options;
  std::vector<std::string> sources;
  std::string checkpoint_interval = "10s";
  std::string replay_timeout = "2s";
  std::string replay_cooldown = "1s";
  std::string auth_token_file;
  std::string auth_token;
  std::string node;

  nats::AddNatsFlags(app, &options.nats);
  nats::StreamFlagText stream_text;
  nats::AddStreamFlags(app, &options.stream, &stream_text);
  std::string liveness_interval = "250ms";
  app.add_option("--liveness-interval", liveness_interval,
                 "JetStream mode: how often agents' heartbeat leases are checked")
      ->capture_default_str();
  std::string max_lease = "5m";
  app.add_option("--max-lease", max_lease,
                 "JetStream mode: longest agent lease honoured, whatever a heartbeat announces "
                 "(a dead agent's sources expire at most this long after its last heartbeat)")
      ->capture_default_str();
  app.add_flag("--embedded", options.embedded,
               "Run the agent pipeline in-process (single node, no NATS)");
  app.add_option("--source", sources,
                 "Engine source (repeatable), as for kvindex-agent: "
                 "'worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://...,replay=tcp://...'. In "
                 "the environment, separate several with ';'")
      ->delimiter(';');
  options.data_dir = "kvindex-data";
  app.add_option("--data-dir", options.data_dir,
                 "Directory for RocksDB checkpoints (created if missing)")
      ->capture_default_str();
  app.add_option("--bootstrap-from", options.bootstrap_from,
                 "A peer router's API URL: a new replica (no checkpoint in --data-dir yet) starts "
                 "from the peer's newest checkpoint instead of the whole log");
  std::string bootstrap_timeout = "5m";
  app.add_option("--bootstrap-timeout", bootstrap_timeout,
                 "Whole --bootstrap-from transfer deadline; past it the router starts from the "
                 "log")
      ->capture_default_str();
  app.add_option("--bootstrap-ca", options.bootstrap_ca,
                 "PEM file of the CAs an https:// --bootstrap-from peer's certificate must chain "
                 "to (default: the system's CAs); the API token is sent to the peer only over "
                 "https")
      ->check(CLI::ExistingFile);
  app.add_option("--bootstrap-max-bytes", options.bootstrap_max_bytes,
                 "Largest checkpoint accepted from --bootstrap-from (the peer must send a "
                 "Content-Length no larger)")
      ->capture_default_str();
  app.add_option("--http", options.http, "HTTP listen address host:port")->capture_default_str();
  app.add_option("--http-threads", options.http_threads,
                 "HTTP I/O threads (event loop; connections are not tied to threads)")
      ->capture_default_str();
  std::string http_server = "event-loop";
  app.add_option("--http-server", http_server,
                 "HTTP server: event-loop, or civetweb (the former thread-per-connection "
                 "server, kept for comparison; none of the --http-max-connections and "
                 "--http-*-timeout limits but the body timeout apply to it)")
      ->check(CLI::IsMember({"event-loop", "civetweb"}))
      ->capture_default_str();
  app.add_option("--http-max-connections", options.http_max_connections,
                 "HTTP connections served at once; past it 503 + Retry-After (/healthz and "
                 "/readyz still answered)")
      ->capture_default_str();
  std::string http_idle_timeout = "60s", http_header_timeout = "10s", http_body_timeout = "30s";
  app.add_option("--http-idle-timeout", http_idle_timeout,
                 "Close a kept-alive HTTP connection idle this long")
      ->capture_default_str();
  app.add_option("--http-header-timeout", http_header_timeout,
                 "Whole request header deadline, from its first byte; past it 408")
      ->capture_default_str();
  app.add_option("--http-body-timeout", http_body_timeout,
                 "Whole request body deadline, from the end of the header; past it 408")
      ->capture_default_str();
  app.add_option("--max-body-bytes", options.max_body_bytes, "Largest request body; larger -> 413")
      ->capture_default_str();
  app.add_option("--http-max-body-total-bytes", options.http_max_body_total_bytes,
                 "Request bodies held in memory at once, all connections together; past it "
                 "503 + Retry-After (at least --max-body-bytes)")
      ->capture_default_str();
  app.add_option("--http-max-connections-per-client", options.http_max_connections_per_client,
                 "Requests in progress at once from one client address (idle connections do "
                 "not count); past it 503 (0 = half of --http-max-connections)")
      ->capture_default_str();
  app.add_option("--checkpoint-interval", checkpoint_interval,
                 "Time between checkpoints (0 = only at shutdown); a restart resumes from the "
                 "newest")
      ->capture_default_str();
  app.add_option("--models", options.models, "Models to index, comma separated (default: all)")
      ->delimiter(',');
  app.add_flag("--filter-subjects", options.filter_subjects,
               "With --nats and --models: read only those models' subjects (and the agents' "
               "heartbeats and expiries), not every model's messages (docs/scaling.md)");
  app.add_option("--tokenizer", options.tokenizers,
                 "MODEL=DIR: load DIR/tokenizer.json for MODEL so /v1/match accepts \"text\" "
                 "(repeatable)");
  app.add_option("--node", node, "Node id of the embedded agent (default: hostname)");
  app.add_option("--replay-timeout", replay_timeout,
                 "Embedded agent: how long to wait for an engine replay")
      ->capture_default_str();
  app.add_option("--replay-cooldown", replay_cooldown,
                 "Embedded agent: minimum time between two gap replays of one source")
      ->capture_default_str();
  app.add_option("--max-model-bytes", options.max_model_bytes,
                 "Index memory per model (node arena + block locator), in bytes; past it new "
                 "blocks of the model are not indexed (counted); 0 = only the hard limit")
      ->capture_default_str();
  app.add_option("--max-models", options.max_models,
                 "Models the index holds (in log order, after --models); stored events of "
                 "further models are dropped (counted); 0 = no cap")
      ->capture_default_str();
  app.add_option("--max-nodes", options.max_nodes,
                 "JetStream mode: most live agents (nodes) the log may speak for (1-1024); a "
                 "new node past it is refused (too_many_nodes), and each live node is "
                 "guaranteed 1024/max-nodes sources in every model (docs/security.md). The "
                 "same on every replica")
      ->capture_default_str();
  app.add_option("--max-blocks-per-tier", options.agent.max_blocks_per_tier,
                 "Embedded agent: blocks one source may hold per tier; past it stored events are "
                 "dropped (block_cap, counted); 0 = no cap")
      ->capture_default_str();
  app.add_option("--zmq-max-message-bytes", options.agent.max_message_bytes,
                 "Embedded agent: largest engine ZMQ message (ZMQ_MAXMSGSIZE; -1 = no limit); a "
                 "larger one drops the connection unread (counted)")
      ->capture_default_str();
  app.add_option("--auth-token-file", auth_token_file,
                 "File holding the bearer token required by the API");
  app.add_option("--auth-token", auth_token,
                 "Bearer token required by the API: set it as KVINDEX_AUTH_TOKEN or in --config "
                 "(refused on the command line), or use --auth-token-file");
  app.add_flag("--metrics-auth", options.metrics_auth,
               "Require the bearer token on /metrics too (/healthz and /readyz stay open)");
  app.add_option("--max-registrations", options.max_registrations,
                 "Embedded: engines registered over HTTP (Mooncake POST /register; "
                 "docs/compat.md) followed at once, besides --source; kept in "
                 "DATA_DIR/registrations.json across restarts; 0 = /register refused")
      ->capture_default_str();
  // SGLang's KV indexer gRPC (docs/compat.md).
  app.add_option("--sglang-indexer", options.sglang_listen,
                 "host:port: serve SGLang's KV indexer gRPC (kv_indexer.v1.KVIndexer, for "
                 "sgl-router --kv-indexer-endpoint http://HOST:PORT) from this index; off unless "
                 "given");
  app.add_flag("--sglang-ingest", options.sglang_ingest,
               "--embedded --sglang-indexer: take ApplyExternalKvBatch (SGLang's KV-event bridge) "
               "into this router's index, each worker_id a source (docs/compat.md); off = "
               "UNIMPLEMENTED");
  app.add_option("--sglang-model", options.sglang_model,
                 "--sglang-indexer: the model SGLang's hash-only requests mean (default: the one "
                 "model the router knows)");
  // The endpoint picker (docs/epp.md).
  app.add_option("--epp", options.epp.listen,
                 "Serve the Gateway API Inference Extension endpoint picker (Envoy ext_proc, "
                 "gRPC h2c) and grpc.health.v1 on host:port; off unless given");
  app.add_option("--epp-health", options.epp.health_listen,
                 "Also serve grpc.health.v1 alone on host:port");
  app.add_option("--epp-tls-cert", options.epp.tls_cert,
                 "PEM certificate (chain) for TLS on --epp, re-read when it changes");
  app.add_option("--epp-tls-key", options.epp.tls_key,
                 "PEM private key for TLS on --epp, re-read when it changes");
  app.add_option("--epp-max-body-bytes", options.epp.service.max_body_bytes,
                 "Largest request body the picker buffers; past it: load-only pick and pass "
                 "through (failure mode open) or 413 (closed)")
      ->capture_default_str();
  std::string epp_failure_mode = "open";
  app.add_option("--epp-failure-mode", epp_failure_mode,
                 "A body the picker cannot parse: load-only pick (open) or 400 (closed)")
      ->check(CLI::IsMember({"open", "closed"}))
      ->capture_default_str();
  app.add_option(
      "--epp-config", options.epp.config_path,
      "YAML: scorer weights, tier weights, seed, fallbacks, model aliases (docs/epp.md)");
  app.add_option("--endpoints-file", options.epp.endpoints_file,
                 "Endpoints in llm-d's file-discovery shape, re-read on change (besides --source "
                 "endpoint=)");
  app.add_option("--render-url", options.epp.tokens.render_url,
                 "vLLM-compatible render server (POST /v1/completions/render, "
                 "/v1/chat/completions/render) for text prompts");
  std::string render_timeout = "50ms";
  app.add_option("--render-timeout", render_timeout,
                 "Deadline of one render call; past it the pick is load-only (counted)")
      ->capture_default_str();
  std::string load_max_age = "1s", load_interval = "50ms";
  app.add_option("--load-max-age", load_max_age,
                 "An engine load sample older than this is not used by the picker (counted)")
      ->capture_default_str();
  app.add_option("--load-interval", load_interval,
                 "--embedded --epp: scrape the engines' /metrics (sources with endpoint=) this "
                 "often; 0 = never")
      ->capture_default_str();
  app.add_option("--ready-max-lag", options.ready_max_lag,
                 "Once caught up, /readyz stays 200 unless the router falls more than this "
                 "many log positions behind the log's end (0 = no bound)")
      ->capture_default_str();
  bool check_config = false;
  config::AddCheckConfigFlag(app, &check_config);

  if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
  if (Status secrets = config::RefuseSecretsOnCommandLine(
          argc, argv, {{"--auth-token", "--auth-token-file FILE or KVINDEX_AUTH_TOKEN"}});
      !secrets.ok()) {
    return Fail(std::string(secrets.message()), 2);
  }

  if (options.embedded && !options.nats.url.empty()) {
    return Fail("--embedded and --nats exclude each other (one log per router)", 2);
  }
  if (!options.embedded) {
    if (options.nats.url.empty()) {
      return Fail("give --nats URL (replicated routers) or --embedded --source ... (single node)",
                  2);
    }
    if (Status s = nats::FinishNatsFlags(stream_text, &options.nats, &options.stream); !s.ok()) {
      return Fail(std::string(s.message()), 2);
    }
    if (Status s = nats::LoadSecrets(&options.nats); !s.ok()) {
      return Fail(std::string(s.message()), 2);
    }
    auto interval = config::ParseDuration(liveness_interval);
    if (!interval.ok() || interval->count() <= 0) {
      return Fail("--liveness-interval: must be a positive duration", 2);
    }
    options.liveness_interval = *interval;
    auto lease = config::ParseDuration(max_lease);
    if (!lease.ok() || lease->count() <= 0) {
      return Fail("--max-lease: must be a positive duration", 2);
    }
    options.max_lease = *lease;
  } else if (sources.empty() &&
             (app.count("--max-registrations") == 0 || options.max_registrations == 0)) {
    // A router that follows nothing is a typo unless it says it waits for
    // engines registered over HTTP.
    return Fail(
        "--embedded needs at least one --source, or --max-registrations N (N > 0) to follow "
        "only engines registered over HTTP (POST /register)",
        2);
  }
  if (auto d = config::ParseDuration(checkpoint_interval); !d.ok() || d->count() < 0) {
    return Fail("--checkpoint-interval: " + (d.ok() ? std::string("must not be negative")
                                                    : std::string(d.status().message())),
                2);
  } else {
    options.checkpoint_interval = *d;
  }
  for (auto [flag, text, out] :
       {std::tuple{"--http-idle-timeout", &http_idle_timeout, &options.http_idle_timeout},
        std::tuple{"--http-header-timeout", &http_header_timeout, &options.http_header_timeout},
        std::tuple{"--http-body-timeout", &http_body_timeout, &options.http_body_timeout},
        std::tuple{"--bootstrap-timeout", &bootstrap_timeout, &options.bootstrap_timeout}}) {
    auto d = config::ParseDuration(*text);
    if (!d.ok() || d->count() <= 0) {
      return Fail(std::string(flag) + ": must be a positive duration", 2);
    }
    *out = *d;
  }
  options.http_backend =
      http_server == "civetweb" ? http::Backend::kThreadPerConnection : http::Backend::kEventLoop;
  options.epp.service.fail_open = epp_failure_mode == "open";
  if (options.epp.tls_cert.empty() != options.epp.tls_key.empty()) {
    return Fail("--epp-tls-cert and --epp-tls-key go together", 2);
  }
  if (options.sglang_ingest && !options.embedded) {
    return Fail(
        "--sglang-ingest is for an embedded router: with --nats, engines' events reach routers "
        "through kvindex-agent --nats URL --node NODE --source ...",
        2);
  }
  if (options.sglang_ingest && options.sglang_listen.empty()) {
    return Fail("--sglang-ingest is for --sglang-indexer, which is not given", 2);
  }
  if (!options.sglang_model.empty() && options.sglang_listen.empty()) {
    return Fail("--sglang-model is for --sglang-indexer, which is not given", 2);
  }
  if (!options.epp.tls_cert.empty() && options.epp.listen.empty()) {
    return Fail("--epp-tls-cert: TLS is for --epp, which is not given", 2);
  }
  if (auto d = config::ParseDuration(render_timeout); !d.ok() || d->count() <= 0) {
    return Fail("--render-timeout: must be a positive duration", 2);
  } else {
    options.epp.tokens.render_timeout = *d;
  }
  if (auto d = config::ParseDuration(load_max_age); !d.ok() || d->count() <= 0) {
    return Fail("--load-max-age: must be a positive duration", 2);
  } else {
    options.epp.load_max_age = *d;
  }
  if (auto d = config::ParseDuration(load_interval); !d.ok() || d->count() < 0) {
    return Fail("--load-interval: must be a duration (0 = off)", 2);
  } else {
    options.load_interval = *d;
  }
  auto replay = config::ParseDuration(replay_timeout);
  if (!replay.ok()) return Fail("--replay-timeout: " + std::string(replay.status().message()), 2);
  auto cooldown = config::ParseDuration(replay_cooldown);
  if (!cooldown.ok()) {
    return Fail("--replay-cooldown: " + std::string(cooldown.status().message()), 2);
  }

  if (Status status = log::Init(common.log_format, common.log_level); !status.ok()) {
    return Fail(std::string(status.message()), 2);
  }
  auto logger = log::Get("router");

  if (!auth_token_file.empty()) {
    std::ifstream in(auth_token_file);
    if (!in) return Fail("cannot read --auth-token-file '" + auth_token_file + "'", 2);
    // The first line, trimmed (docs/api.md); anything after it is ignored
    // with a warning that names the file, never its content.
    std::string first_line;
    std::getline(in, first_line);
    std::stringstream rest;
    rest << in.rdbuf();
    auth_token = std::string(strings::Trim(first_line));
    if (auth_token.empty()) {
      return Fail("--auth-token-file '" + auth_token_file + "': the first line is empty", 2);
    }
    if (!strings::Trim(rest.str()).empty()) {
      logger->warn(
          "--auth-token-file '{}' has more than one line; only the first line is the token",
          auth_token_file);
    }
  }
  options.auth_token = std::string(strings::Trim(auth_token));

  if (node.empty()) {
    char host[256] = {0};
    node = gethostname(host, sizeof(host) - 1) == 0 && host[0] != 0 ? host : "embedded";
  }
  options.agent.node = node;
  options.agent.replay_timeout = *replay;
  options.agent.replay_cooldown = *cooldown;
  for (const std::string& text : sources) {
    auto specs = ingest::ParseSourceSpec(text);
    if (!specs.ok()) return Fail("--source: " + std::string(specs.status().message()), 2);
    for (auto& spec : *specs) options.agent.sources.push_back(std::move(spec));
  }
  if (Status status = options.Validate(); !status.ok()) {
    return Fail(std::string(status.message()), 2);
  }
  if (check_config) {
    // Valid: print it and stop before any socket, thread or --data-dir.
    return config::ReportCheckedConfig(
        app,
        {.secret_options = {"auth-token"},
         .secret_environment = {"KVINDEX_NATS_PASSWORD", "KVINDEX_NATS_TOKEN"}},
        stdout);
  }

  // Every thread started from here on inherits the blocked signals; the main
  // thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // A signal during start (a long bootstrap) cancels it: a waiter thread
  // takes the signal from the start on.
  static std::atomic<bool> stop{false};
  int received = 0;
  std::thread waiter([&signals, &received] {
    sigwait(&signals, &received);
    stop.store(true);
  });
  options.cancel = &stop;
  const std::string listen = options.http;
  const bool options_embedded = options.embedded;
  const std::string nats_description = options.nats.Describe();
  router::Router router(std::move(options));
  if (Status status = router.Start(); !status.ok()) {
    if (!stop.load()) kill(getpid(), SIGTERM);  // ends the waiter
    waiter.join();
    if (absl::IsCancelled(status)) {
      logger->info("signal {} received during start, stopped", received);
      return 0;
    }
    logger->error("start failed: {}", status.ToString());
    return 1;
  }
  if (options_embedded) {
    logger->info("serving on {} (port {}), {} --source values", listen, router.port(),
                 sources.size());
  } else {
    logger->info("serving on {} (port {}), consuming JetStream ({})", listen, router.port(),
                 nats_description);
  }
  std::fprintf(stderr, "kvindex-router: listening on port %u\n", router.port());
  if (router.epp_port() != 0) {
    std::fprintf(stderr, "kvindex-router: epp on port %d\n", router.epp_port());
  }
  if (router.sglang_port() != 0) {
    std::fprintf(stderr, "kvindex-router: sglang indexer on port %d\n", router.sglang_port());
  }

  waiter.join();
  logger->info("signal {} received, shutting down", received);
  router.Stop();
  logger->info("stopped");
  return 0;
}
