// kvindex-mockengine: simulated inference engines that replay a Mooncake
// request trace and publish the KV events real vLLM / SGLang workers would,
// on real ZMQ sockets, with a replay socket per engine.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "services/mockengine/engine_endpoint.h"
#include "services/mockengine/prompt_tokens.h"
#include "services/mockengine/simulated_engine.h"
#include "shared/config/cli.h"
#include "shared/log/log.h"
#include "shared/trace/mooncake_trace.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Options {
  std::string trace;
  int workers = 4;
  std::string host = "127.0.0.1";
  int pub_base_port = 5557;
  int replay_base_port = 5657;  // 0 = no replay sockets
  std::string wire = "vllm-map";
  std::string topic;
  uint32_t block_size = 16;
  size_t device_capacity = 16384;
  size_t host_capacity = 0;
  double rate = 200;  // requests per second over all engines; 0 = as fast as possible
  size_t limit = 0;
  std::string start_delay = "500ms";
  bool exit_when_done = false;
  int print_prompt = -1;
};

// Sleeps until `deadline` while answering replay requests.
void ServeUntil(std::vector<std::unique_ptr<kvindex::mockengine::EngineEndpoint>>& endpoints,
                std::chrono::steady_clock::time_point deadline) {
  std::vector<zmq::pollitem_t> items;
  for (auto& endpoint : endpoints) {
    if (zmq::socket_t* socket = endpoint->replay_socket()) {
      items.push_back({socket->handle(), 0, ZMQ_POLLIN, 0});
    }
  }
  while (!g_stop.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return;
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (items.empty()) {
      std::this_thread::sleep_for(std::min(wait, std::chrono::milliseconds(100)));
    } else {
      try {
        zmq::poll(items.data(), items.size(), std::min(wait, std::chrono::milliseconds(100)));
      } catch (const zmq::error_t&) {
        // EINTR from SIGINT/SIGTERM: the loop condition sees g_stop.
      }
    }
    for (auto& endpoint : endpoints) endpoint->ServeReplay();
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvindex::mockengine;
  CLI::App app{
      "kvindex-mockengine: simulated vLLM/SGLang engines publishing real KV-event wire "
      "traffic (ZMQ PUB + replay ROUTER) from a Mooncake trace",
      "kvindex-mockengine"};
  Options o;
  kvindex::config::CommonOptions common;
  kvindex::config::AddCommonOptions(app, &common);
  app.add_option("--trace", o.trace, "Mooncake trace (JSON lines with hash_ids)")->required();
  app.add_option("--workers", o.workers, "Number of simulated engines")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--host", o.host, "Address the engines bind")->capture_default_str();
  app.add_option("--pub-base-port", o.pub_base_port, "PUB port of engine 0 (engine i: +i)")
      ->capture_default_str();
  app.add_option("--replay-base-port", o.replay_base_port,
                 "Replay ROUTER port of engine 0 (engine i: +i); 0 = no replay")
      ->capture_default_str();
  app.add_option("--wire", o.wire, "Wire form: vllm-map, vllm-array or sglang")
      ->check(CLI::IsMember({"vllm-map", "vllm-array", "sglang"}))
      ->capture_default_str();
  app.add_option("--topic", o.topic, "ZMQ topic frame")->capture_default_str();
  app.add_option("--block-size", o.block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--device-capacity", o.device_capacity, "GPU blocks per engine")
      ->capture_default_str();
  app.add_option("--host-capacity", o.host_capacity, "CPU offload blocks per engine (0 = none)")
      ->capture_default_str();
  app.add_option("--rate", o.rate, "Requests per second over all engines (0 = unthrottled)")
      ->capture_default_str();
  app.add_option("--limit", o.limit, "Requests to replay (0 = the whole trace)")
      ->capture_default_str();
  app.add_option("--start-delay", o.start_delay, "Wait before the first request")
      ->capture_default_str();
  app.add_flag("--exit-when-done", o.exit_when_done,
               "Exit after the trace instead of serving replay until SIGINT/SIGTERM");
  app.add_option("--print-prompt", o.print_prompt,
                 "Print request N's prompt token ids as a JSON array and exit");
  if (auto code = kvindex::config::Parse(app, argc, argv)) return *code;
  if (auto status = kvindex::log::Init(common.log_format, common.log_level); !status.ok()) {
    std::fprintf(stderr, "kvindex-mockengine: error: %s\n", status.ToString().c_str());
    return 2;
  }
  auto logger = kvindex::log::Get("mockengine");
  // --wire picks the producer's encoding (docs/wire-format.md).
  kvindex::wire::EncodeOptions encoding;
  if (o.wire == "vllm-array") encoding.form = kvindex::wire::EventForm::kArray;
  if (o.wire == "sglang") encoding.hashes = kvindex::wire::HashEncoding::kSigned;
  const bool sglang = o.wire == "sglang";
  auto delay = kvindex::config::ParseDuration(o.start_delay);
  if (!delay.ok()) {
    std::fprintf(stderr, "kvindex-mockengine: error: --start-delay: %s\n",
                 std::string(delay.status().message()).c_str());
    return 2;
  }

  const size_t wanted = o.print_prompt >= 0 ? static_cast<size_t>(o.print_prompt) + 1 : o.limit;
  auto requests = kvindex::trace::ReadTrace(o.trace, wanted);
  if (!requests.ok()) {
    std::fprintf(stderr, "kvindex-mockengine: error: %s\n", requests.status().ToString().c_str());
    return 1;
  }
  if (o.print_prompt >= 0) {
    if (requests->size() <= static_cast<size_t>(o.print_prompt)) {
      std::fprintf(stderr, "kvindex-mockengine: error: the trace has only %zu requests\n",
                   requests->size());
      return 1;
    }
    const std::vector<uint32_t> tokens = PromptTokens((*requests)[o.print_prompt]);
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
  zmq::context_t context(1);
  std::vector<std::unique_ptr<EngineEndpoint>> endpoints;
  std::vector<SimulatedEngine> engines;
  for (int i = 0; i < o.workers; ++i) {
    EndpointOptions endpoint_options;
    endpoint_options.pub_endpoint = "tcp://" + o.host + ":" + std::to_string(o.pub_base_port + i);
    if (o.replay_base_port > 0) {
      endpoint_options.replay_endpoint =
          "tcp://" + o.host + ":" + std::to_string(o.replay_base_port + i);
    }
    endpoint_options.topic = o.topic;
    endpoint_options.layout = sglang ? ReplayLayout::kWithoutTopic : ReplayLayout::kWithTopic;
    endpoints.push_back(std::make_unique<EngineEndpoint>(context, endpoint_options));
    if (auto status = endpoints.back()->Bind(); !status.ok()) {
      std::fprintf(stderr, "kvindex-mockengine: error: %s\n", status.ToString().c_str());
      return 1;
    }
    engines.emplace_back(EngineOptions{.block_size = o.block_size,
                                       .device_capacity_blocks = o.device_capacity,
                                       .host_capacity_blocks = o.host_capacity,
                                       .host_medium = sglang ? "CPU_PINNED" : "CPU",
                                       .hash_seed = 0xC0FFEEull * (i + 1)});
  }
  logger->info("{} engines ({}) publishing from {}:{}; {} requests from {}", o.workers, o.wire,
               o.host, o.pub_base_port, requests->size(), o.trace);

  auto next = std::chrono::steady_clock::now() + *delay;
  ServeUntil(endpoints, next);
  const auto interval = o.rate > 0 ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::duration<double>(1.0 / o.rate))
                                   : std::chrono::nanoseconds(0);
  std::vector<kvindex::wire::WireEvent> events;
  std::vector<uint8_t> payload;
  size_t published = 0;
  for (size_t r = 0; r < requests->size() && !g_stop.load(); ++r) {
    const size_t w = r % engines.size();
    events.clear();
    engines[w].ServePrompt(PromptTokens((*requests)[r]), &events);
    if (!events.empty()) {
      const double now_s =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      payload.clear();
      kvindex::wire::EncodeBatch(now_s, events, 0u, encoding, &payload);
      if (auto status = endpoints[w]->Publish(payload); !status.ok()) {
        logger->error("engine {}: {}", w, status.ToString());
        return 1;
      }
      ++published;
    }
    next += interval;
    if (interval.count() > 0) {
      ServeUntil(endpoints, next);
    } else {
      for (auto& endpoint : endpoints) endpoint->ServeReplay();
    }
  }
  logger->info("trace done: {} batches published", published);
  if (!o.exit_when_done) {
    while (!g_stop.load())
      ServeUntil(endpoints, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
  return 0;
}
