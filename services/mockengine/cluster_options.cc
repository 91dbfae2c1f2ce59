#include "services/mockengine/cluster_options.h"

#include <algorithm>
#include <charconv>

namespace kvindex::mockengine {
namespace {

constexpr std::string_view kWires[] = {"vllm-map", "vllm-array", "sglang", "trtllm"};

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

std::string_view EngineOfWire(std::string_view wire) {
  if (wire == "sglang") return "sglang";
  if (wire == "trtllm") return "trtllm";
  return "vllm";
}

Status ApplyEngineOverride(std::string_view text, ClusterOptions* options) {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError("--engine '" + std::string(text) + "': " + std::string(what));
  };
  long index = -1;
  WorkerConfig* worker = nullptr;
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  for (size_t begin = 0; begin < text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string_view item = text.substr(begin, comma - begin);
    begin = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return bad("expected key=value, got '" + std::string(item) + "'");
    pairs.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    if (pairs.back().first == "index" && !ParseNumber(pairs.back().second, &index)) {
      return bad("index must be an integer");
    }
  }
  if (index < 0 || static_cast<size_t>(index) >= options->workers.size()) {
    return bad("index= must name a worker in [0, --workers)");
  }
  // Applied to a copy: a bad value leaves the worker as it was.
  WorkerConfig copy = options->workers[static_cast<size_t>(index)];
  worker = &copy;
  for (const auto& [key, value] : pairs) {
    bool ok = true;
    if (key == "index") {
      continue;
    } else if (key == "wire") {
      worker->wire = std::string(value);
      ok = std::find(std::begin(kWires), std::end(kWires), value) != std::end(kWires);
    } else if (key == "device") {
      ok = ParseNumber(value, &worker->device);
    } else if (key == "host") {
      ok = ParseNumber(value, &worker->host);
    } else if (key == "disk") {
      ok = ParseNumber(value, &worker->disk);
    } else if (key == "dp_ranks") {
      ok = ParseNumber(value, &worker->dp_ranks) && worker->dp_ranks >= 1;
    } else if (key == "speed") {
      ok = ParseNumber(value, &worker->speed) && worker->speed > 0;
    } else if (key == "max_running") {
      ok = ParseNumber(value, &worker->max_running);
    } else if (key == "model") {
      worker->model = std::string(value);
      ok =
          std::find(options->models.begin(), options->models.end(), value) != options->models.end();
    } else if (key == "cpu_events") {
      ok = value == "placeholder" || value == "tokens";
      worker->cpu_events_tokens = value == "tokens";
    } else {
      return bad("unknown key '" + std::string(key) + "'");
    }
    if (!ok) return bad("bad value for " + std::string(key) + ": '" + std::string(value) + "'");
  }
  options->workers[static_cast<size_t>(index)] = std::move(copy);
  return absl::OkStatus();
}

Status Validate(const ClusterOptions& options) {
  if (options.workers.empty()) return absl::InvalidArgumentError("no workers");
  for (const std::string& model : options.models) {
    const bool served = std::any_of(options.workers.begin(), options.workers.end(),
                                    [&](const WorkerConfig& w) { return w.model == model; });
    if (!served) return absl::InvalidArgumentError("no worker serves model '" + model + "'");
  }
  if (options.policy == Policy::kKvAware && options.router_url.empty() && !options.dry_run) {
    return absl::InvalidArgumentError("--policy kv-aware needs --router URL");
  }
  if (options.policy == Policy::kEpp && !options.dry_run &&
      (options.epp_address.empty() || options.engine_http_base_port <= 0)) {
    return absl::InvalidArgumentError(
        "--policy epp needs --epp HOST:PORT and --engine-http-base-port (the engines' "
        "OpenAI servers the picker picks from)");
  }
  return absl::OkStatus();
}

std::string EngineAddress(const ClusterOptions& options, size_t worker) {
  if (options.engine_http_base_port <= 0) return "";
  return options.host + ":" + std::to_string(options.engine_http_base_port + worker);
}

std::vector<std::string> SourceStrings(const ClusterOptions& options) {
  std::vector<std::string> out;
  int port = 0;  // (worker, rank) pairs in order: ranks take consecutive ports
  for (size_t i = 0; i < options.workers.size(); ++i) {
    const WorkerConfig& w = options.workers[i];
    std::string s = "worker=" + options.worker_prefix + std::to_string(i) +
                    ",engine=" + std::string(EngineOfWire(w.wire)) + ",model=" + w.model +
                    ",block_size=" + std::to_string(options.block_size) + ",pub=tcp://" +
                    options.host + ":" + std::to_string(options.pub_base_port + port);
    if (options.replay_base_port > 0) {
      s += ",replay=tcp://" + options.host + ":" + std::to_string(options.replay_base_port + port);
    }
    if (w.dp_ranks > 1) s += ",dp_ranks=" + std::to_string(w.dp_ranks);
    if (options.engine_http_base_port > 0) s += ",endpoint=" + EngineAddress(options, i);
    out.push_back(std::move(s));
    port += static_cast<int>(w.dp_ranks);
  }
  return out;
}

}  // namespace kvindex::mockengine
