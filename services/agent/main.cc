// kvindex-agent: per-node ingest agent (docs/operations.md).
// Engine ZMQ KV-event streams -> normalized placement events -> output.
//
// Outputs: NATS JetStream (--nats: batched, acknowledged, buffered while NATS
// is away, snapshots on request; docs/operations.md), or `--output jsonl`,
// every placement event as a JSON line on stdout.
// HTTP (--http host:port): /metrics, /healthz, /readyz, /v1/sources.
// SIGINT/SIGTERM stop it gracefully (sockets closed, output flushed).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "services/agent/jsonl_publisher.h"
#include "services/agent/load_publisher.h"
#include "shared/config/cli.h"
#include "shared/http/server.h"
#include "shared/ingest/agent_pipeline.h"
#include "shared/log/log.h"
#include "shared/metrics/heap_trimmer.h"
#include "shared/metrics/metrics.h"
#include "shared/nats/flags.h"
#include "shared/nats/subjects.h"
#include "shared/publish/jetstream_publisher.h"
#include "shared/publish/resync_listener.h"

namespace {

constexpr const char* kName = "kvindex-agent";

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "%s: %s\n", kName, message.c_str());
  return code;
}

std::string SourcesJson(const kvindex::ingest::AgentPipeline& pipeline) {
  std::string out = "{\"sources\":[";
  bool first = true;
  for (const auto& s : pipeline.Sources()) {
    if (!first) out += ",";
    first = false;
    out += "{\"worker\":\"";
    kvindex::http::AppendJsonEscaped(s.worker, &out);
    out += "\",\"dp_rank\":" + std::to_string(s.dp_rank) + ",\"model\":\"";
    kvindex::http::AppendJsonEscaped(s.model, &out);
    out += "\",\"last_seq\":" + (s.has_seq ? std::to_string(s.last_seq) : std::string("null")) +
           ",\"gaps\":" + std::to_string(s.gaps) +
           ",\"replays_ok\":" + std::to_string(s.replays_ok) +
           ",\"replays_failed\":" + std::to_string(s.replays_failed) +
           ",\"restarts\":" + std::to_string(s.restarts) + "}";
  }
  out += "],\"ready\":";
  out += pipeline.Ready() ? "true" : "false";
  out += "}";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvindex;
  CLI::App app{"kvindex-agent: engine ZMQ KV events -> normalized placement events", kName};
  config::CommonOptions common;
  config::AddCommonOptions(app, &common);

  ingest::AgentOptions options;
  nats::NatsOptions nats_options;
  nats::StreamOptions stream_options;
  nats::StreamFlagText stream_text;
  JetStreamPublisherOptions publisher_options;
  std::string batch_delay = "2ms";
  std::string ack_timeout = "5s";
  std::vector<std::string> sources;
  std::string http_listen;
  std::string output;
  std::string lease = "30s";
  std::string replay_timeout = "2s";
  std::string replay_cooldown = "1s";
  std::string heartbeat_interval = "0";

  nats::AddNatsFlags(app, &nats_options);
  nats::AddStreamFlags(app, &stream_options, &stream_text);
  app.add_option("--batch-bytes", publisher_options.max_batch_bytes,
                 "JetStream: a message is sealed at this many bytes of events")
      ->capture_default_str();
  app.add_option("--batch-delay", batch_delay,
                 "JetStream: ... or when its first event waited this long")
      ->capture_default_str();
  app.add_option("--max-in-flight", publisher_options.max_in_flight,
                 "JetStream: messages sent and not acknowledged at most")
      ->capture_default_str();
  app.add_option("--buffer-bytes", publisher_options.buffer_bytes,
                 "JetStream: unacknowledged bytes held while NATS is unreachable; past it the "
                 "affected sources are republished as snapshots")
      ->capture_default_str();
  app.add_option("--ack-timeout", ack_timeout,
                 "JetStream: a message not acknowledged within this time is sent again")
      ->capture_default_str();
  app.add_option("--node", options.node, "Agent node id, stamped into every event")->required();
  app.add_option(
         "--source", sources,
         "Engine source (repeatable): 'worker=w0,engine=vllm|sglang|trtllm,model=M,"
         "block_size=16,pub=[bind:]tcp://HOST:PORT[,replay=tcp://HOST:PORT]"
         "[,dp_ranks=N][,report_mode=exact|full]'. In the environment, separate several with ';'")
      ->required()
      ->delimiter(';');
  app.add_option("--http", http_listen,
                 "HTTP listen address host:port for /metrics, /healthz, /readyz (empty: off)");
  app.add_option("--output", output,
                 "Event output without --nats: jsonl (one JSON event per line on stdout)")
      ->check(CLI::IsMember({"jsonl"}));
  app.add_option("--lease", lease, "Heartbeat lease announced to routers (e.g. 30s)")
      ->capture_default_str();
  std::string load_interval = "50ms";
  app.add_option("--load-interval", load_interval,
                 "Scrape the engines' /metrics (sources with endpoint=) this often and publish "
                 "their load on core NATS for the endpoint picker; 0 = never")
      ->capture_default_str();
  app.add_option("--heartbeat-interval", heartbeat_interval,
                 "Interval between heartbeats (0: a third of the lease)")
      ->capture_default_str();
  app.add_option("--replay-timeout", replay_timeout,
                 "Longest silence of an engine replay socket before a replay fails")
      ->capture_default_str();
  app.add_option("--replay-cooldown", replay_cooldown,
                 "Minimum time between two gap replays of one source")
      ->capture_default_str();
  app.add_option("--receive-hwm", options.receive_hwm,
                 "SUB socket receive high-water mark, in messages")
      ->capture_default_str();
  app.add_option("--max-blocks-per-tier", options.max_blocks_per_tier,
                 "Blocks one source may hold per tier; past it stored events are dropped "
                 "(block_cap, counted); 0 = no cap")
      ->capture_default_str();
  app.add_option("--zmq-max-message-bytes", options.max_message_bytes,
                 "Largest engine ZMQ message (ZMQ_MAXMSGSIZE; -1 = no limit); a larger one "
                 "drops the connection unread (counted)")
      ->capture_default_str();
  bool check_config = false;
  config::AddCheckConfigFlag(app, &check_config);

  if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;

  if (Status status = log::Init(common.log_format, common.log_level); !status.ok()) {
    return Fail(std::string(status.message()), 2);
  }
  for (const std::string& text : sources) {
    StatusOr<std::vector<ingest::SourceSpec>> specs = ingest::ParseSourceSpec(text);
    if (!specs.ok()) return Fail(std::string(specs.status().message()), 2);
    options.sources.insert(options.sources.end(), specs->begin(), specs->end());
  }
  struct Duration {
    const char* flag;
    const std::string* text;
    std::chrono::milliseconds* out;
  };
  std::chrono::milliseconds lease_ms{0};
  std::chrono::milliseconds batch_delay_ms{0};
  std::chrono::milliseconds load_interval_ms{0};
  for (const Duration& d :
       {Duration{"--lease", &lease, &lease_ms},
        Duration{"--batch-delay", &batch_delay, &batch_delay_ms},
        Duration{"--ack-timeout", &ack_timeout, &publisher_options.ack_timeout},
        Duration{"--replay-timeout", &replay_timeout, &options.replay_timeout},
        Duration{"--replay-cooldown", &replay_cooldown, &options.replay_cooldown},
        Duration{"--heartbeat-interval", &heartbeat_interval, &options.heartbeat_interval},
        Duration{"--load-interval", &load_interval, &load_interval_ms}}) {
    StatusOr<std::chrono::milliseconds> value = config::ParseDuration(*d.text);
    if (!value.ok()) {
      return Fail(std::string(d.flag) + ": " + std::string(value.status().message()), 2);
    }
    *d.out = *value;
  }
  if (lease_ms.count() <= 0 || lease_ms.count() > UINT32_MAX) {
    return Fail("--lease: must be between 1ms and 49 days", 2);
  }
  options.heartbeat_lease_ms = static_cast<uint32_t>(lease_ms.count());
  if (Status status = options.Validate(); !status.ok()) {
    return Fail(std::string(status.message()), 2);
  }
  const bool use_nats = !nats_options.url.empty();
  if (use_nats && !output.empty()) return Fail("--nats and --output exclude each other", 2);
  if (!use_nats && output != "jsonl") {
    return Fail("no event output: give --nats URL (JetStream) or --output jsonl", 2);
  }
  if (use_nats) {
    if (Status s = nats::FinishNatsFlags(stream_text, &nats_options, &stream_options); !s.ok()) {
      return Fail(std::string(s.message()), 2);
    }
    if (Status s = nats::LoadSecrets(&nats_options); !s.ok()) {
      return Fail(std::string(s.message()), 2);
    }
    if (Status s = nats_options.Validate(); !s.ok()) return Fail(std::string(s.message()), 2);
    publisher_options.max_delay = batch_delay_ms;
    // A delay below 1 ms (truncated to 0) still waits for a batch a little.
    if (batch_delay_ms.count() == 0 && batch_delay != "0") {
      publisher_options.max_delay = std::chrono::microseconds(1);
    }
    publisher_options.node = options.node;
    publisher_options.subjects = stream_options.subjects;
    // Subjects NATS would refuse (a control line past 4 KiB) stop the
    // connection: refuse them here, where --check-config sees it too.
    if (Status s = nats::ValidateSubjectNames(stream_options.subjects.prefix, options.node);
        !s.ok()) {
      return Fail(std::string(s.message()), 2);
    }
    if (Status s = publisher_options.Validate(); !s.ok()) {
      return Fail(std::string(s.message()), 2);
    }
  }

  http::ServerOptions http_options;
  http_options.listen = http_listen;
  http_options.threads = 4;
  if (!http_listen.empty()) {
    if (Status status = http_options.Validate(); !status.ok()) {
      return Fail("--http: " + std::string(status.message()), 2);
    }
  }
  if (check_config) {
    // Valid: print it and stop before any socket or thread. (A malformed ZMQ
    // endpoint is only found when the socket connects.)
    return config::ReportCheckedConfig(
        app,
        {.secret_options = {},
         .secret_environment = {"KVINDEX_NATS_PASSWORD", "KVINDEX_NATS_TOKEN"}},
        stdout);
  }

  // Signals are handled by sigwait in this thread; block them before any
  // other thread starts so they inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout is an error from fwrite, not a kill

  auto logger = log::Get("agent");
  prometheus::Registry registry;
  std::unique_ptr<nats::Connection> connection;
  std::unique_ptr<PlacementPublisher> publisher;
  JetStreamPublisher* jetstream = nullptr;
  if (use_nats) {
    // Refused credentials never stop the agent (its buffer would be lost):
    // the connection is dialled anew with every secret file read again,
    // counted, and /readyz says so meanwhile.
    nats_options.keep_trying_auth = true;
    auto connected = nats::Connection::Connect(nats_options, &registry, "agent", {},
                                               /*retry_initial=*/true);
    if (!connected.ok()) return Fail(std::string(connected.status().message()), 1);
    connection = std::move(*connected);
    nats::Connection* current = connection.get();
    publisher_options.current_connection = [current] { return current->raw(); };
    // A refused publish that needs the stream to change (deleted, full)
    // checks it, creating it when missing, before the next round.
    publisher_options.check_stream = [current, stream_options] {
      return nats::EnsureStream(current->jetstream(), stream_options);
    };
    auto owned =
        std::make_unique<JetStreamPublisher>(connection->raw(), publisher_options, &registry);
    jetstream = owned.get();
    publisher = std::move(owned);
    logger->info("publishing to JetStream ({}), stream {}, incarnation {}", nats_options.Describe(),
                 stream_options.name, jetstream->incarnation());
  } else {
    publisher = std::make_unique<agent::JsonlPublisher>(stdout);
  }
  ingest::AgentPipeline pipeline(options, publisher.get(), &registry);
  std::unique_ptr<ResyncListener> listener;
  std::thread nats_setup;
  std::atomic<bool> stopping{false};
  if (jetstream != nullptr) {
    jetstream->SetResyncHandler([&pipeline](const ResyncRequest& request) {
      pipeline.RequestSnapshots(request.all, request.sources);
    });
    jetstream->SetStreamReady(false);  // until the setup below ensured the stream
    if (Status s = jetstream->Start(); !s.ok()) return Fail(std::string(s.message()), 1);
    listener = std::make_unique<ResyncListener>(
        connection->jetstream(), stream_options.name, stream_options.subjects.Expire(options.node),
        [&pipeline] { pipeline.RequestSnapshots(true, {}); });
    // Agents create a missing stream but never change one: its settings
    // belong to the routers (or kvindex-ctl stream apply). What differs is a
    // WARN naming the fields and this gauge.
    stream_options.owns_settings = false;
    prometheus::Gauge* stream_mismatch =
        &prometheus::BuildGauge()
             .Name("kvindex_agent_stream_settings_mismatch")
             .Help(
                 "Stream settings in which the existing stream differs from this agent's "
                 "--stream-* flags (left unchanged; routers own them)")
             .Register(registry)
             .Add({});
    // The stream and the listener need JetStream up; start order must not
    // matter, so they are retried in the background. A new connection
    // (dialled after refused credentials) gets a new listener.
    nats_setup = std::thread([&, stream_mismatch] {
      auto backoff = std::chrono::milliseconds(100);
      bool stream_ready = false;
      uint64_t listening = connection->generation();
      while (!stopping.load()) {
        if (const uint64_t now = connection->generation(); now != listening) {
          listener->Stop();
          listener = std::make_unique<ResyncListener>(
              connection->jetstream(), stream_options.name,
              stream_options.subjects.Expire(options.node),
              [&pipeline] { pipeline.RequestSnapshots(true, {}); });
          listening = now;
          stream_ready = false;
          backoff = std::chrono::milliseconds(100);
        }
        if (!stream_ready) {
          std::vector<std::string> mismatch;
          Status s = nats::EnsureStream(connection->jetstream(), stream_options, &mismatch);
          stream_ready = s.ok();
          stream_mismatch->Set(static_cast<double>(mismatch.size()));
          if (stream_ready) jetstream->SetStreamReady(true);
          if (!s.ok()) logger->warn("stream {}: {} (retrying)", stream_options.name, s.ToString());
        }
        if (stream_ready && (listener->started() || listener->Start().ok())) {
          backoff = std::chrono::milliseconds(200);  // watching for a new connection
        } else {
          backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
        }
        std::this_thread::sleep_for(backoff);
      }
    });
  }

  std::unique_ptr<http::Server> server;
  if (!http_listen.empty()) {
    server = std::make_unique<http::Server>(http_options);
    server->Handle("GET", "/metrics", [&registry](const http::Request&, http::Response& r) {
      r.content_type = metrics::kTextContentType;
      r.body = metrics::SerializeText(registry);
    });
    server->Handle("GET", "/healthz",
                   [](const http::Request&, http::Response& r) {
                     r.content_type = "text/plain";
                     r.body = "ok\n";
                   },
                   {.open = true});
    server->Handle("GET", "/readyz",
                   [&pipeline, &connection](const http::Request&, http::Response& r) {
                     r.content_type = "text/plain";
                     if (connection != nullptr && connection->auth_failing()) {
                       r.status = 503;
                       r.body = "not ready: NATS refuses the credentials (retrying)\n";
                     } else if (pipeline.Ready()) {
                       r.body = "ready\n";
                     } else {
                       r.status = 503;
                       r.body = "not ready: start-up replay in progress\n";
                     }
                   },
                   {.open = true});
    server->Handle("GET", "/v1/sources", [&pipeline](const http::Request&, http::Response& r) {
      r.body = SourcesJson(pipeline);
    });
    if (Status status = server->Start(); !status.ok()) {
      return Fail("--http: " + std::string(status.message()), 1);
    }
    logger->info("HTTP on port {}", server->port());
  }

  if (Status status = pipeline.Start(); !status.ok()) {
    if (server) server->Stop();
    stopping.store(true);
    if (nats_setup.joinable()) nats_setup.join();
    if (jetstream != nullptr) jetstream->Stop();  // its resync handler names the pipeline
    // A malformed endpoint is a flag error (2); an address in use is not (1).
    return Fail(std::string(status.message()),
                status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }
  logger->info("agent {} following {} source(s)", options.node, options.sources.size());
  std::unique_ptr<epp::LoadScraper> load =
      use_nats
          ? agent::StartLoadPublisher(connection->raw(), stream_options.subjects.prefix,
                                      options.node, options.sources, load_interval_ms, &registry)
          : nullptr;

  // Engines' replay bursts and JetStream back-pressure leave freed heap behind.
  metrics::HeapTrimmer heap_trimmer({}, &registry, "kvindex_agent");
  heap_trimmer.Start();

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  logger->info("signal {}: stopping", signal_number);
  heap_trimmer.Stop();
  if (load) load->Stop();
  pipeline.Stop();
  stopping.store(true);
  if (nats_setup.joinable()) nats_setup.join();
  if (listener) listener->Stop();
  if (server) server->Stop();
  if (jetstream != nullptr) {
    // Give JetStream a moment to acknowledge what is queued, then stop. Each
    // NATS user (publisher, listener) waits for its own callbacks in
    // Stop/Shutdown, so the connection may close before or after them.
    if (Status s = jetstream->Shutdown(std::chrono::steady_clock::now() + std::chrono::seconds(5));
        !s.ok()) {
      logger->warn("{}", s.ToString());
    }
    listener.reset();
    connection.reset();
  } else {
    publisher->Flush().IgnoreError();  // best effort: stdout may be gone at shutdown
  }
  return 0;
}
