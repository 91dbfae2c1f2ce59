#include "shared/epp/engine_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

namespace kvindex::epp {
namespace {

enum class Gauge { kWaiting, kRunning, kKvUse, kNone };

Gauge GaugeOf(std::string_view name) {
  if (name == "vllm:num_requests_waiting" || name == "sglang:num_queue_reqs") {
    return Gauge::kWaiting;
  }
  if (name == "vllm:num_requests_running" || name == "sglang:num_running_reqs") {
    return Gauge::kRunning;
  }
  if (name == "vllm:kv_cache_usage_perc" || name == "vllm:gpu_cache_usage_perc" ||
      name == "sglang:token_usage") {
    return Gauge::kKvUse;
  }
  return Gauge::kNone;
}

// The sample value of one exposition line after its name (and labels):
// " value [timestamp]". False when it is not a finite number.
bool ParseValue(std::string_view rest, double* value) {
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  const size_t end = rest.find_first_of(" \t\r");
  const std::string token(rest.substr(0, end));
  if (token.empty()) return false;
  char* parsed_end = nullptr;
  const double v = std::strtod(token.c_str(), &parsed_end);
  if (parsed_end != token.c_str() + token.size() || !std::isfinite(v)) return false;
  *value = v;
  return true;
}

}  // namespace

codec::EngineLoad ParseEngineMetrics(std::string_view text) {
  codec::EngineLoad load;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ \t");
    if (name_end == std::string_view::npos) continue;
    const Gauge gauge = GaugeOf(line.substr(0, name_end));
    if (gauge == Gauge::kNone) continue;
    std::string_view rest = line.substr(name_end);
    if (rest.front() == '{') {
      // Label values may hold '}' inside quotes: skip them quote-aware.
      bool quoted = false;
      size_t i = 1;
      for (; i < rest.size(); ++i) {
        if (quoted && rest[i] == '\\') {
          ++i;
        } else if (rest[i] == '"') {
          quoted = !quoted;
        } else if (!quoted && rest[i] == '}') {
          break;
        }
      }
      if (i >= rest.size()) continue;
      rest.remove_prefix(i + 1);
    }
    double value = 0;
    if (!ParseValue(rest, &value) || value < 0) continue;
    switch (gauge) {
      case Gauge::kWaiting:
        load.waiting = std::max(load.waiting, 0.0) + value;
        break;
      case Gauge::kRunning:
        load.running = std::max(load.running, 0.0) + value;
        break;
      case Gauge::kKvUse:
        load.kv_use = std::max(load.kv_use, std::min(value, 1.0));
        break;
      case Gauge::kNone:
        break;
    }
  }
  return load;
}

}  // namespace kvindex::epp
