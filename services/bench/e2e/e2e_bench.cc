#include "services/bench/e2e/e2e_bench.h"

#include <prometheus/registry.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "services/mockengine/engine_endpoint.h"
#include "services/router/router.h"
#include "shared/base/mutex.h"
#include "shared/base/percentile.h"
#include "shared/config/cli.h"
#include "shared/http/client.h"
#include "shared/ingest/agent_pipeline.h"
#include "shared/ingest/source_spec.h"
#include "shared/log/log.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/nats/testing/nats_server.h"
#include "shared/publish/jetstream_publisher.h"
#include "shared/wire/event_encoder.h"

namespace kvindex::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kModel[] = "bench";

struct Options {
  double rate = 100000;         // block-ops/s offered in the visibility phase
  std::string duration = "5s";  // visibility phase length
  uint64_t throughput_ops = 2000000;
  uint32_t engines = 2;
  uint32_t agents = 1;  // JetStream path: agent pipelines the engines are split among
  uint32_t blocks_per_event = 32;
  uint32_t block_size = 16;
  uint64_t window_blocks = 100000;  // blocks an engine holds before it removes the oldest
  std::string nats;                 // empty: start a nats-server
  std::string batch_delay = "2ms";  // the agent's --batch-delay
  bool json = false;
};

// One visibility probe: a chain an engine published at `published`.
struct Sample {
  Clock::time_point published;
  std::string worker;
  std::string body;  // the /v1/match request for the chain's tokens
};

// The simulated engines: one thread owns their ZMQ sockets, answers replay
// requests and publishes stored chains (and removals past the window).
class Engines {
 public:
  Engines(const Options& options, std::string prefix)
      : options_(options), prefix_(std::move(prefix)), context_(1) {}
  ~Engines() { Stop(); }

  Status Start() {
    for (uint32_t i = 0; i < options_.engines; ++i) {
      auto pub = nats::testing::FreePort();
      auto replay = nats::testing::FreePort();
      mockengine::EndpointOptions e;
      e.pub_endpoint = "tcp://127.0.0.1:" + std::to_string(pub);
      e.replay_endpoint = "tcp://127.0.0.1:" + std::to_string(replay);
      engines_.push_back(std::make_unique<Engine>(context_, e));
      engines_.back()->name = prefix_ + std::to_string(i);
      KVINDEX_RETURN_IF_ERROR(engines_.back()->endpoint.Bind());
      specs_.push_back("worker=" + engines_.back()->name + ",engine=vllm,model=" + kModel +
                       ",block_size=" + std::to_string(options_.block_size) +
                       ",pub=" + e.pub_endpoint + ",replay=" + e.replay_endpoint);
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  const std::vector<std::string>& specs() const { return specs_; }

  // Publishes `ops` block-ops at `rate` per second (0: as fast as possible);
  // `sample` is offered a chain whenever it returns true for "want one".
  // Returns when done, with the last chain published.
  Sample Publish(uint64_t ops, double rate, const std::function<bool()>& want_sample,
                 const std::function<void(Sample)>& sample) {
    MutexLock lock(&mu_);
    job_ = Job{ops, rate, &want_sample, &sample};
    done_ = false;
    while (!done_) cv_.Wait(&mu_);
    return last_;
  }

 private:
  struct Engine {
    Engine(zmq::context_t& context, mockengine::EndpointOptions options)
        : endpoint(context, std::move(options)) {}
    mockengine::EngineEndpoint endpoint;
    std::string name;
    uint64_t next_hash = 1;
    std::deque<std::vector<uint64_t>> held;  // engine hashes of stored chains, oldest first
    uint64_t held_blocks = 0;
  };
  struct Job {
    uint64_t ops;
    double rate;
    const std::function<bool()>* want_sample;
    const std::function<void(Sample)>* sample;
  };

  // One batch on engine `e`: a fresh chain, plus the oldest chain's removal
  // once the engine holds more than the window. Returns its block-ops.
  uint64_t PublishBatch(Engine& e, const Job& job, bool want_sample, Sample* out) {
    const uint32_t n = options_.blocks_per_event;
    wire::WireEvent stored;
    stored.type = wire::EventType::kBlockStored;
    stored.block_size = options_.block_size;
    stored.medium = "GPU";
    stored.token_ids.resize(static_cast<size_t>(n) * options_.block_size);
    for (uint32_t b = 0; b < n; ++b) {
      stored.block_hashes.push_back(e.next_hash++);
      for (uint32_t t = 0; t < options_.block_size; ++t) {
        // Unique tokens per block: the canonical hashes never repeat.
        stored.token_ids[static_cast<size_t>(b) * options_.block_size + t] =
            static_cast<uint32_t>((token_counter_++) & 0x7fffffffu);
      }
    }
    wire::WireEvent events[2];
    size_t count = 0;
    uint64_t ops = n;
    events[count++] = stored;
    e.held.push_back(stored.block_hashes);
    e.held_blocks += n;
    if (e.held_blocks > options_.window_blocks) {
      wire::WireEvent removed;
      removed.type = wire::EventType::kBlockRemoved;
      removed.medium = "GPU";
      removed.block_hashes = std::move(e.held.front());
      e.held.pop_front();
      e.held_blocks -= removed.block_hashes.size();
      ops += removed.block_hashes.size();
      events[count++] = std::move(removed);
    }
    payload_.clear();
    const double ts =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    wire::EncodeBatch(ts, {events, count}, 0u, {}, &payload_);
    Status status = e.endpoint.Publish(payload_);
    if (!status.ok())
      std::fprintf(stderr, "engine %s: %s\n", e.name.c_str(), status.ToString().c_str());
    if (want_sample || out != nullptr) {
      Sample s;
      s.published = Clock::now();
      s.worker = e.name;
      nlohmann::json body = {{"model", kModel}, {"tokens", stored.token_ids}};
      s.body = body.dump();
      if (out != nullptr) *out = s;
      if (want_sample) (*job.sample)(std::move(s));
    }
    return ops;
  }

  void Run() {
    size_t next_engine = 0;
    while (!stop_.load()) {
      for (auto& e : engines_) e->endpoint.ServeReplay();
      std::optional<Job> job;
      {
        MutexLock lock(&mu_);
        if (!done_) job = job_;
      }
      if (!job) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      const auto start = Clock::now();
      uint64_t published = 0;
      Sample last;
      while (published < job->ops && !stop_.load()) {
        if (job->rate > 0) {
          const double due = static_cast<double>(published) / job->rate;
          const double now = std::chrono::duration<double>(Clock::now() - start).count();
          if (now < due) {
            std::this_thread::sleep_for(std::chrono::duration<double>(std::min(due - now, 0.001)));
            continue;
          }
        }
        Engine& e = *engines_[next_engine++ % engines_.size()];
        const bool want = (*job->want_sample)();
        const bool final_one = published + options_.blocks_per_event * 2 >= job->ops;
        published += PublishBatch(e, *job, want, final_one ? &last : nullptr);
        if ((published & 0xFFF) < options_.blocks_per_event) {
          for (auto& engine : engines_) engine->endpoint.ServeReplay();
        }
      }
      MutexLock lock(&mu_);
      last_ = std::move(last);
      done_ = true;
      cv_.SignalAll();
    }
  }

  const Options options_;
  const std::string prefix_;
  zmq::context_t context_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::string> specs_;
  std::vector<uint8_t> payload_;
  uint64_t token_counter_ = 1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  CondVar cv_;
  std::optional<Job> job_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  Sample last_ ABSL_GUARDED_BY(mu_);
};

// Polls /v1/match until a sample's chain is fully visible.
StatusOr<double> TimeToVisible(const http::Url& url, const Sample& s, uint32_t blocks,
                               std::chrono::milliseconds timeout) {
  const auto deadline = s.published + timeout;
  http::ClientRequest request;
  request.method = "POST";
  request.url = url;
  request.path = "/v1/match";
  request.body = s.body;
  while (Clock::now() < deadline) {
    auto reply = http::Fetch(request);
    if (reply.ok() && reply->status == 200) {
      const auto seen = Clock::now();
      auto json = nlohmann::json::parse(reply->body, nullptr, false);
      if (!json.is_discarded()) {
        for (const auto& w : json["workers"]) {
          if (w["worker"] == s.worker && w["longest"].get<uint32_t>() >= blocks) {
            return std::chrono::duration<double, std::milli>(seen - s.published).count();
          }
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return absl::DeadlineExceededError("chain of " + s.worker + " not visible in time");
}

// One probe at a time, so no sample waits in a queue before it is polled.
class Prober {
 public:
  Prober(http::Url url, uint32_t blocks) : url_(std::move(url)), blocks_(blocks) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Prober() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    thread_.join();
  }
  bool Idle() const { return idle_.load(); }
  void Submit(Sample s) {
    MutexLock lock(&mu_);
    pending_ = std::move(s);
    idle_.store(false);
    cv_.SignalAll();
  }
  void WaitIdle() {
    while (!idle_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<double> TakeLatencies() {
    MutexLock lock(&mu_);
    return std::move(latencies_);
  }
  uint64_t timeouts() const { return timeouts_.load(); }

 private:
  void Run() {
    MutexLock lock(&mu_);
    while (true) {
      while (!stop_ && !pending_.has_value()) cv_.Wait(&mu_);
      if (stop_) return;
      Sample s = std::move(*pending_);
      pending_.reset();
      mu_.Unlock();
      auto ms = TimeToVisible(url_, s, blocks_, std::chrono::seconds(5));
      mu_.Lock();
      if (ms.ok()) {
        latencies_.push_back(*ms);
      } else {
        timeouts_.fetch_add(1);
      }
      idle_.store(true);
    }
  }

  const http::Url url_;
  const uint32_t blocks_;
  std::thread thread_;
  Mutex mu_;
  CondVar cv_;
  std::optional<Sample> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<double> latencies_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> idle_{true};
  std::atomic<uint64_t> timeouts_{0};
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// Upper bound of the bucket holding quantile q of a Prometheus histogram.
double HistogramQuantile(prometheus::Registry& registry, const std::string& name, double q) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name || family.metric.empty()) continue;
    const auto& h = family.metric[0].histogram;
    if (h.sample_count == 0) return 0;
    const double target = q * static_cast<double>(h.sample_count);
    for (const auto& bucket : h.bucket) {
      if (static_cast<double>(bucket.cumulative_count) >= target) return bucket.upper_bound;
    }
  }
  return 0;
}

struct PathFigures {
  double block_ops_per_s = 0;
  double visible_p50_ms = 0, visible_p99_ms = 0, visible_max_ms = 0;
  size_t samples = 0;
  uint64_t timeouts = 0;
  double throughput_seconds = 0;
  uint64_t applied_seq = 0;
  double ack_p50_ms = 0, ack_p99_ms = 0;  // agent seal -> JetStream ack (JetStream only)
};

// Runs both phases against a ready router.
StatusOr<PathFigures> Measure(const Options& o, Engines& engines, uint16_t port,
                              double duration_s) {
  PathFigures f;
  KVINDEX_ASSIGN_OR_RETURN(http::Url url, http::ParseUrl("127.0.0.1:" + std::to_string(port)));
  Prober prober(url, o.blocks_per_event);
  // Visibility at a fixed offered load; a sample every ~2 ms when the prober is free.
  auto last_sample = Clock::now();
  std::function<bool()> want = [&] {
    if (!prober.Idle() || Clock::now() - last_sample < std::chrono::milliseconds(2)) return false;
    last_sample = Clock::now();
    return true;
  };
  std::function<void(Sample)> submit = [&](Sample s) { prober.Submit(std::move(s)); };
  engines.Publish(static_cast<uint64_t>(o.rate * duration_s), o.rate, want, submit);
  prober.WaitIdle();
  std::vector<double> latencies = prober.TakeLatencies();
  f.samples = latencies.size();
  f.timeouts = prober.timeouts();
  f.visible_p50_ms = Percentile(latencies, 0.50);
  f.visible_p99_ms = Percentile(latencies, 0.99);
  f.visible_max_ms = latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end());

  // Sustained throughput: as fast as the engines publish, until the last chain is visible.
  std::function<bool()> never = [] { return false; };
  std::function<void(Sample)> drop = [](Sample) {};
  const auto start = Clock::now();
  Sample last = engines.Publish(o.throughput_ops, 0, never, drop);
  KVINDEX_ASSIGN_OR_RETURN(double ms,
                           TimeToVisible(url, last, o.blocks_per_event, std::chrono::seconds(300)));
  (void)ms;
  f.throughput_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  f.block_ops_per_s = static_cast<double>(o.throughput_ops) / f.throughput_seconds;
  return f;
}

void Print(const char* name, const PathFigures& f, bool jetstream) {
  std::printf(
      "  %-9s  sustained %10.0f block-ops/s (%.2f s)   visible p50 %6.2f ms  p99 %6.2f ms"
      "  max %6.2f ms  (%zu samples, %llu timeouts)\n",
      name, f.block_ops_per_s, f.throughput_seconds, f.visible_p50_ms, f.visible_p99_ms,
      f.visible_max_ms, f.samples, static_cast<unsigned long long>(f.timeouts));
  if (jetstream) {
    std::printf(
        "  %-9s  agent seal -> JetStream ack: p50 <= %.1f ms, p99 <= %.1f ms "
        "(histogram bucket bounds)\n",
        "", f.ack_p50_ms, f.ack_p99_ms);
  }
}

nlohmann::json ToJson(const PathFigures& f) {
  return {{"block_ops_per_s", f.block_ops_per_s},
          {"visible_p50_ms", f.visible_p50_ms},
          {"visible_p99_ms", f.visible_p99_ms},
          {"visible_max_ms", f.visible_max_ms},
          {"samples", f.samples},
          {"timeouts", f.timeouts},
          {"throughput_seconds", f.throughput_seconds},
          {"ack_p50_ms", f.ack_p50_ms},
          {"ack_p99_ms", f.ack_p99_ms}};
}

bool WaitFor(const std::function<bool()>& ready, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

StatusOr<PathFigures> RunEmbedded(const Options& o, double duration_s, const std::string& dir) {
  Engines engines(o, "embedded-e");
  KVINDEX_RETURN_IF_ERROR(engines.Start());
  router::RouterOptions ro;
  ro.embedded = true;
  ro.http = "127.0.0.1:0";
  ro.http_threads = 4;
  ro.data_dir = dir + "/embedded";
  ro.agent.node = "bench-embedded";
  for (const std::string& text : engines.specs()) {
    KVINDEX_ASSIGN_OR_RETURN(auto specs, ingest::ParseSourceSpec(text));
    for (auto& spec : specs) ro.agent.sources.push_back(std::move(spec));
  }
  router::Router r(std::move(ro));
  KVINDEX_RETURN_IF_ERROR(r.Start());
  if (!WaitFor([&] { return r.Ready(); }, std::chrono::seconds(30))) {
    return absl::DeadlineExceededError("embedded router not ready");
  }
  auto f = Measure(o, engines, r.port(), duration_s);
  r.Stop();
  return f;
}

StatusOr<PathFigures> RunJetStream(const Options& o, double duration_s, const std::string& url,
                                   const std::string& dir) {
  Engines engines(o, "js-e");
  KVINDEX_RETURN_IF_ERROR(engines.Start());
  const std::string tag = std::to_string(::getpid()) + "x" +
                          std::to_string(Clock::now().time_since_epoch().count() % 1000000);
  nats::StreamOptions stream;
  stream.name = "KVBENCH" + tag;
  stream.subjects.prefix = "kvbench" + tag + ".events";
  nats::NatsOptions nats_options;
  nats_options.url = url;

  router::RouterOptions ro;
  ro.embedded = false;
  ro.http = "127.0.0.1:0";
  ro.http_threads = 4;
  ro.data_dir = dir + "/jetstream";
  ro.nats = nats_options;
  ro.stream = stream;
  router::Router r(std::move(ro));
  KVINDEX_RETURN_IF_ERROR(r.Start());

  // One agent per simulated node, each with its own NATS connection,
  // publisher and node id; engine i reports to agent i % agents.
  struct Agent {
    prometheus::Registry registry;
    std::unique_ptr<nats::Connection> connection;
    std::unique_ptr<JetStreamPublisher> publisher;
    std::unique_ptr<ingest::AgentPipeline> pipeline;
  };
  std::vector<std::unique_ptr<Agent>> agents;
  for (uint32_t a = 0; a < o.agents; ++a) {
    auto& agent = *agents.emplace_back(std::make_unique<Agent>());
    const std::string node = "bench-agent-" + std::to_string(a);
    KVINDEX_ASSIGN_OR_RETURN(
        agent.connection,
        nats::Connection::Connect(nats_options, &agent.registry, "agent", {}, false));
    KVINDEX_RETURN_IF_ERROR(nats::EnsureStream(agent.connection->jetstream(), stream));
    JetStreamPublisherOptions po;
    po.node = node;
    po.subjects = stream.subjects;
    po.max_delay = std::chrono::duration_cast<std::chrono::microseconds>(
        *config::ParseDuration(o.batch_delay));
    agent.publisher =
        std::make_unique<JetStreamPublisher>(agent.connection->raw(), po, &agent.registry);
    ingest::AgentOptions ao;
    ao.node = node;
    for (size_t e = a; e < engines.specs().size(); e += o.agents) {
      KVINDEX_ASSIGN_OR_RETURN(auto specs, ingest::ParseSourceSpec(engines.specs()[e]));
      for (auto& spec : specs) ao.sources.push_back(std::move(spec));
    }
    agent.pipeline =
        std::make_unique<ingest::AgentPipeline>(ao, agent.publisher.get(), &agent.registry);
    ingest::AgentPipeline* pipeline = agent.pipeline.get();
    agent.publisher->SetResyncHandler([pipeline](const ResyncRequest& request) {
      pipeline->RequestSnapshots(request.all, request.sources);
    });
    KVINDEX_RETURN_IF_ERROR(agent.publisher->Start());
    KVINDEX_RETURN_IF_ERROR(agent.pipeline->Start());
  }
  const auto agents_ready = [&agents] {
    for (const auto& agent : agents) {
      if (!agent->pipeline->Ready()) return false;
    }
    return true;
  };
  if (!WaitFor([&] { return r.Ready() && agents_ready(); }, std::chrono::seconds(60))) {
    return absl::DeadlineExceededError("router or agent not ready");
  }
  auto f = Measure(o, engines, r.port(), duration_s);
  if (f.ok()) {
    // Agent 0's acks (every agent publishes alike).
    prometheus::Registry& registry = agents.front()->registry;
    f->ack_p50_ms =
        1000 * HistogramQuantile(registry, "kvindex_agent_nats_publish_latency_seconds", 0.50);
    f->ack_p99_ms =
        1000 * HistogramQuantile(registry, "kvindex_agent_nats_publish_latency_seconds", 0.99);
    f->applied_seq = r.index().Stats().applied_seq;
  }
  for (auto& agent : agents) agent->pipeline->Stop();
  for (auto& agent : agents) agent->publisher->Stop();
  agents.clear();
  r.Stop();
  return f;
}

}  // namespace

int RunE2eBench(int argc, char** argv) {
  Options o;
  CLI::App app{"kvindex-bench e2e: engines -> agent -> JetStream -> router -> /v1/match",
               "kvindex-bench e2e"};
  app.add_option("--rate", o.rate, "Offered block-ops/s in the visibility phase")
      ->capture_default_str();
  app.add_option("--duration", o.duration, "Visibility phase length")->capture_default_str();
  app.add_option("--throughput-ops", o.throughput_ops, "Block-ops of the throughput phase")
      ->capture_default_str();
  app.add_option("--engines", o.engines, "Simulated engines (sources)")->capture_default_str();
  app.add_option("--agents", o.agents,
                 "Agents of the JetStream path (one NATS connection and node id each); engine i "
                 "reports to agent i % agents (at most --engines)")
      ->capture_default_str();
  app.add_option("--blocks-per-event", o.blocks_per_event, "Blocks per stored chain")
      ->capture_default_str();
  app.add_option("--block-size", o.block_size, "Tokens per block")->capture_default_str();
  app.add_option("--window-blocks", o.window_blocks,
                 "Blocks an engine holds before it removes its oldest chain")
      ->capture_default_str();
  app.add_option("--batch-delay", o.batch_delay,
                 "The agent's batch delay (as kvindex-agent --batch-delay)")
      ->capture_default_str();
  app.add_option("--nats", o.nats, "NATS URL (default: start a nats-server on a free port)");
  app.add_flag("--json", o.json, "Print one JSON object");
  if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
  auto duration = config::ParseDuration(o.duration);
  if (!duration.ok() || duration->count() <= 0 || !config::ParseDuration(o.batch_delay).ok() ||
      o.rate <= 0 || o.engines == 0 || o.agents == 0 || o.agents > o.engines ||
      o.blocks_per_event == 0 || o.block_size == 0 || o.throughput_ops < o.blocks_per_event * 4) {
    std::fprintf(stderr,
                 "kvindex-bench e2e: need --duration, --rate, --engines, --blocks-per-event, "
                 "--block-size > 0, 1 <= --agents <= --engines and --throughput-ops >= 4 "
                 "events\n");
    return 2;
  }
  const double duration_s = static_cast<double>(duration->count()) / 1000.0;
  // The components log what a deployment would; the figures are what matters here.
  log::Init("text", "warn").IgnoreError();
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kvindex-bench-e2e-" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);

  std::unique_ptr<nats::testing::NatsServerProcess> server;
  std::string url = o.nats;
  if (url.empty()) {
    auto started = nats::testing::NatsServerProcess::Start({});
    if (!started.ok()) {
      std::fprintf(stderr, "kvindex-bench e2e: %s\n", started.status().ToString().c_str());
      return 1;
    }
    server = std::move(*started);
    url = server->url();
  }
  auto embedded = RunEmbedded(o, duration_s, dir);
  auto jetstream = RunJetStream(o, duration_s, url, dir);
  server.reset();
  std::filesystem::remove_all(dir);
  if (!embedded.ok() || !jetstream.ok()) {
    std::fprintf(stderr, "kvindex-bench e2e: %s\n",
                 (!embedded.ok() ? embedded.status() : jetstream.status()).ToString().c_str());
    return 1;
  }
  if (o.json) {
    nlohmann::json out = ToJson(*jetstream);
    out["embedded"] = ToJson(*embedded);
    out["offered_block_ops_per_s"] = o.rate;
    out["engines"] = o.engines;
    out["agents"] = o.agents;
    out["blocks_per_event"] = o.blocks_per_event;
    out["throughput_ops"] = o.throughput_ops;
    out["batch_delay"] = o.batch_delay;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "kvindex-bench e2e: %u engines, %u agents, %u blocks per chain, visibility at %.0f "
        "block-ops/s for %.1f s, throughput over %llu block-ops\n",
        o.engines, o.agents, o.blocks_per_event, o.rate, duration_s,
        static_cast<unsigned long long>(o.throughput_ops));
    Print("jetstream", *jetstream, true);
    Print("embedded", *embedded, false);
  }
  return 0;
}

}  // namespace kvindex::bench
