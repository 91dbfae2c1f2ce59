#include "services/mockengine/engine_http.h"

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "shared/query/json_writer.h"

namespace kvindex::mockengine {

EngineHttp::EngineHttp(std::string listen, std::string model, EngineHttpHooks hooks)
    : model_(std::move(model)), hooks_(std::move(hooks)) {
  http::ServerOptions options;
  options.listen = std::move(listen);
  options.threads = 1;
  server_ = std::make_unique<http::Server>(options);
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    server_->Handle("POST", path,
                    [this](const http::Request& rq, http::Response& rs) { Complete(rq, rs); });
  }
  server_->Handle("GET", "/metrics",
                  [this](const http::Request&, http::Response& rs) { Metrics(rs); });
  server_->Handle("GET", "/health", [](const http::Request&, http::Response& rs) {
    rs.content_type = "text/plain";
    rs.body = "ok\n";
  });
}

EngineHttp::~EngineHttp() { Stop(); }

Status EngineHttp::Start() { return server_->Start(); }

void EngineHttp::Stop() { server_->Stop(); }

void EngineHttp::Complete(const http::Request& request, http::Response& response) const {
  const auto body = nlohmann::json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object() || !body.contains("model") ||
      !body["model"].is_string()) {
    http::SetError(response, 400, "expected an OpenAI JSON body with \"model\"");
    return;
  }
  if (body["model"].get<std::string>() != model_) {
    http::SetError(response, 404,
                   "The model `" + body["model"].get<std::string>() +
                       "` does not exist (this engine serves " + model_ + ")");
    return;
  }
  const std::string_view id = request.Header(kRequestHeader);
  uint64_t number = 0;
  if (id.empty() || std::from_chars(id.data(), id.data() + id.size(), number).ec != std::errc()) {
    http::SetError(response, 400, std::string("missing or bad ") + kRequestHeader);
    return;
  }
  if (!hooks_.on_request(number)) {
    http::SetError(response, 409, "request " + std::string(id) + " is not expected here");
    return;
  }
  query::JsonWriter w(&response.body);
  w.BeginObject();
  w.Field("id", "cmpl-" + std::string(id));
  w.Field("object", request.path == "/v1/completions" ? "text_completion" : "chat.completion");
  w.Field("model", model_);
  w.Key("choices");
  w.BeginArray();
  w.EndArray();
  w.EndObject();
}

void EngineHttp::Metrics(http::Response& response) const {
  const EngineLoad load = hooks_.load();
  response.content_type = "text/plain; version=0.0.4";
  std::string& out = response.body;
  std::string labels = "{model_name=\"";
  AppendJsonEscaped(model_, &labels);
  labels += "\"}";
  auto gauge = [&](const char* name, const char* type, double value) {
    char number[32];
    std::snprintf(number, sizeof(number), "%.17g", value);
    out += std::string("# TYPE ") + name + " " + type + "\n" + name + labels + " " + number + "\n";
  };
  gauge("vllm:num_requests_running", "gauge", load.running);
  gauge("vllm:num_requests_waiting", "gauge", load.waiting);
  gauge("vllm:kv_cache_usage_perc", "gauge", load.kv_use);
  gauge("vllm:request_success_total", "counter", static_cast<double>(load.served));
}

}  // namespace kvindex::mockengine
