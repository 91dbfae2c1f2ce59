#include "services/ctl/client/client_commands.h"

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "shared/config/cli.h"
#include "shared/http/client.h"

namespace kvindex::ctl {
namespace {

using nlohmann::json;

// Fixed-width text table; the column width is the widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (width.size() < row.size()) width.resize(row.size(), 0);
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size(); ++i) {
        out += row[i];
        if (i + 1 < row.size()) out.append(width[i] - row[i].size() + 2, ' ');
      }
      out += '\n';
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "-";
  return value.dump();
}

std::string FormatUnixMs(const json& value) {
  if (!value.is_number_unsigned()) return "-";
  const uint64_t ms = value.get<uint64_t>();
  const time_t seconds = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[96];
  std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<unsigned>(ms % 1000));
  return buffer;
}

std::string ErrorText(const http::ClientResponse& response) {
  json body = json::parse(response.body, nullptr, false);
  if (body.is_object() && body.contains("error")) return Text(body["error"]);
  return response.body.empty() ? "(empty body)" : response.body;
}

std::string ResolveToken(const std::string& token_file, const std::string& token) {
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    std::stringstream text;
    text << in.rdbuf();
    std::string value = text.str();
    while (!value.empty() &&
           (value.back() == '\n' || value.back() == '\r' || value.back() == ' ')) {
      value.pop_back();
    }
    return value;
  }
  return token;
}

}  // namespace

std::string FormatMatchTable(const std::string& json_body) {
  json j = json::parse(json_body, nullptr, false);
  if (!j.is_object()) return "";
  std::string out = "model " + Text(j.value("model", json())) + "  blocks " +
                    Text(j.value("blocks", json())) + "  applied_seq " +
                    Text(j.value("applied_seq", json())) + "\n";
  Table table(
      {"WORKER", "DP_RANK", "LONGEST", "DEVICE", "HOST", "DISK", "EXTERNAL", "DEVICE_PREFIX"});
  for (const json& w : j.value("workers", json::array())) {
    table.Add({Text(w.value("worker", json())), Text(w.value("dp_rank", json())),
               Text(w.value("longest", json())), Text(w.value("device", json())),
               Text(w.value("host", json())), Text(w.value("disk", json())),
               Text(w.value("external", json())), Text(w.value("device_prefix", json()))});
  }
  if (j.value("workers", json::array()).empty()) return out + "(no worker holds a prefix)\n";
  return out + table.Render();
}

std::string FormatStateTable(const std::string& json_body) {
  json j = json::parse(json_body, nullptr, false);
  if (!j.is_object()) return "";
  Table table({"FIELD", "VALUE"});
  table.Add({"applied_seq", Text(j.value("applied_seq", json()))});
  table.Add({"digest", Text(j.value("digest", json()))});
  const json entries = j.value("entries", json::object());
  for (const char* tier : {"device", "host", "disk", "external"}) {
    table.Add({std::string("entries.") + tier, Text(entries.value(tier, json()))});
  }
  table.Add({"sources", Text(j.value("sources", json()))});
  table.Add({"ready", Text(j.value("ready", json()))});
  std::string models;
  for (const json& m : j.value("models", json::array()))
    models += (models.empty() ? "" : ",") + Text(m);
  table.Add({"models", models.empty() ? "-" : models});
  return table.Render();
}

std::string FormatWorkersTable(const std::string& json_body) {
  json j = json::parse(json_body, nullptr, false);
  if (!j.is_object()) return "";
  Table table({"MODEL", "WORKER", "DP_RANK", "AGENT", "DEVICE", "HOST", "DISK", "EXTERNAL",
               "LAST_EVENT", "ENGINE_SEQ"});
  for (const json& w : j.value("workers", json::array())) {
    const json entries = w.value("entries", json::object());
    const json ingest = w.value("ingest", json::object());
    table.Add({Text(w.value("model", json())), Text(w.value("worker", json())),
               Text(w.value("dp_rank", json())), Text(w.value("agent", json())),
               Text(entries.value("device", json())), Text(entries.value("host", json())),
               Text(entries.value("disk", json())), Text(entries.value("external", json())),
               FormatUnixMs(w.value("last_event_unix_ms", json())),
               Text(ingest.value("last_seq", json()))});
  }
  return table.Render();
}

int RunClientCommand(int argc, char** argv) {
  const std::string command = argc > 0 ? argv[0] : "";
  if (command != "match" && command != "state" && command != "workers") {
    std::fprintf(stderr, "kvindex-ctl: unknown client command '%s'\n", command.c_str());
    return 2;
  }
  CLI::App app{"kvindex-ctl " + command + ": query a kvindex-router", "kvindex-ctl " + command};
  std::string router = "http://127.0.0.1:8080";
  std::string model, lora_name, cache_salt, token_file, token;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> local_hashes;
  bool as_json = false;
  double timeout_s = 10;
  app.add_option("--router", router, "Router base URL")->capture_default_str();
  app.add_flag("--json", as_json, "Print the router's JSON answer instead of a table");
  app.add_option("--timeout", timeout_s, "Request timeout in seconds")->capture_default_str();
  app.add_option("--auth-token-file", token_file, "File holding the API bearer token");
  app.add_option(
      "--auth-token", token,
      "API bearer token: KVINDEX_AUTH_TOKEN or --config only (refused on the command line)");
  if (command == "match") {
    app.add_option("--model", model, "Model name")->required();
    auto* t = app.add_option("--tokens", tokens, "Token ids, comma separated")->delimiter(',');
    auto* h = app.add_option("--local-hashes", local_hashes, "Local block hashes, comma separated")
                  ->delimiter(',');
    t->excludes(h);
    app.add_option("--lora-name", lora_name, "LoRA adapter name");
    app.add_option("--cache-salt", cache_salt, "Cache salt");
  }
  if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
  if (Status secrets = config::RefuseSecretsOnCommandLine(
          argc, argv, {{"--auth-token", "--auth-token-file FILE or KVINDEX_AUTH_TOKEN"}});
      !secrets.ok()) {
    std::fprintf(stderr, "kvindex-ctl %s: %s\n", command.c_str(),
                 std::string(secrets.message()).c_str());
    return 2;
  }
  if (command == "match" && tokens.empty() && local_hashes.empty()) {
    std::fprintf(stderr, "kvindex-ctl match: give --tokens or --local-hashes\n");
    return 2;
  }

  auto url = http::ParseUrl(router);
  if (!url.ok()) {
    std::fprintf(stderr, "kvindex-ctl %s: --router: %s\n", command.c_str(),
                 std::string(url.status().message()).c_str());
    return 2;
  }
  http::ClientRequest request;
  request.url = *url;
  request.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const std::string bearer = ResolveToken(token_file, token);
  if (!bearer.empty()) request.headers.emplace_back("Authorization", "Bearer " + bearer);
  if (command == "match") {
    json body = {{"model", model}};
    if (!tokens.empty()) body["tokens"] = tokens;
    if (!local_hashes.empty()) body["local_hashes"] = local_hashes;
    if (!lora_name.empty()) body["lora_name"] = lora_name;
    if (!cache_salt.empty()) body["cache_salt"] = cache_salt;
    request.method = "POST";
    request.path = "/v1/match";
    request.body = body.dump();
  } else {
    request.method = "GET";
    request.path = command == "state" ? "/v1/state" : "/v1/workers";
  }
  auto response = http::Fetch(request);
  if (!response.ok()) {
    std::fprintf(stderr, "kvindex-ctl %s: %s\n", command.c_str(),
                 std::string(response.status().message()).c_str());
    return 1;
  }
  if (response->status != 200) {
    std::fprintf(stderr, "kvindex-ctl %s: router answered %d: %s\n", command.c_str(),
                 response->status, ErrorText(*response).c_str());
    return 1;
  }
  if (as_json) {
    std::fputs(response->body.c_str(), stdout);
    if (response->body.empty() || response->body.back() != '\n') std::fputc('\n', stdout);
    return 0;
  }
  const std::string table = command == "match"   ? FormatMatchTable(response->body)
                            : command == "state" ? FormatStateTable(response->body)
                                                 : FormatWorkersTable(response->body);
  if (table.empty()) {
    std::fprintf(stderr, "kvindex-ctl %s: the router's answer is not JSON\n", command.c_str());
    return 1;
  }
  std::fputs(table.c_str(), stdout);
  return 0;
}

}  // namespace kvindex::ctl
