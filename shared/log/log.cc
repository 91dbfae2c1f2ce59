#include "shared/log/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <string>
#include <string_view>
#include "shared/base/mutex.h"

#include "shared/base/json_escape.h"

namespace kvindex::log {
namespace {

// Writes the message payload JSON-escaped, for the json pattern's "msg" field.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    thread_local std::string escaped;
    escaped.clear();
    AppendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()), &escaped);
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

struct State {
  Mutex mu;
  bool json ABSL_GUARDED_BY(mu) = false;
  spdlog::level::level_enum level ABSL_GUARDED_BY(mu) = spdlog::level::info;
  const spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
};

State& GetState() {
  static State* state = new State();
  return *state;
}

std::unique_ptr<spdlog::formatter> MakeFormatter(bool json) {
  if (!json) {
    return std::make_unique<spdlog::pattern_formatter>("%Y-%m-%dT%H:%M:%S.%fZ %L %n: %v",
                                                       spdlog::pattern_time_type::utc);
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
      R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"%n","msg":"%*"})");
  return formatter;
}

}  // namespace

Status Init(std::string_view format, std::string_view level) {
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError("log format must be text or json, got '" +
                                      std::string(format) + "'");
  }
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError("unknown log level '" + std::string(level) + "'");
  }
  State& state = GetState();
  MutexLock lock(&state.mu);
  state.json = format == "json";
  state.level = parsed;
  state.sink->set_formatter(MakeFormatter(state.json));
  spdlog::apply_all([level = state.level](const std::shared_ptr<spdlog::logger>& logger) {
    logger->set_level(level);
  });
  return absl::OkStatus();
}

std::shared_ptr<spdlog::logger> Get(const std::string& subsystem) {
  State& state = GetState();
  MutexLock lock(&state.mu);
  if (auto existing = spdlog::get(subsystem)) return existing;
  state.sink->set_formatter(MakeFormatter(state.json));
  auto logger = std::make_shared<spdlog::logger>(subsystem, state.sink);
  logger->set_level(state.level);
  spdlog::register_logger(logger);
  return logger;
}

bool RateLimiter::Allow(uint64_t* suppressed, std::chrono::steady_clock::time_point at) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
  int64_t next = next_allowed_ns_.load(std::memory_order_relaxed);
  const int64_t step = std::chrono::duration_cast<std::chrono::nanoseconds>(interval_).count();
  while (now >= next) {
    if (next_allowed_ns_.compare_exchange_weak(next, now + step, std::memory_order_relaxed)) {
      *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
      return true;
    }
  }
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace kvindex::log
