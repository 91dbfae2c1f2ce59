#include "shared/epp/endpoints.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

namespace kvindex::epp {

std::vector<Endpoint> EndpointsFromSources(const std::vector<ingest::SourceSpec>& specs) {
  std::vector<Endpoint> out;
  for (const ingest::SourceSpec& spec : specs) {
    if (spec.endpoint.empty()) continue;
    out.push_back({spec.endpoint, SourceKey{spec.worker, spec.dp_rank}, spec.model});
  }
  return out;
}

StatusOr<std::vector<Endpoint>> ParseEndpointsFile(const std::string& text) {
  auto invalid = [](const std::string& what) {
    return absl::InvalidArgumentError("endpoints file: " + what);
  };
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return invalid(std::string("invalid YAML: ") + e.what());
  }
  if (!root.IsMap() || !root["endpoints"]) return invalid("expected a map with 'endpoints'");
  const YAML::Node list = root["endpoints"];
  if (list.IsNull()) return std::vector<Endpoint>{};
  if (!list.IsSequence()) return invalid("'endpoints' must be a list");
  std::vector<Endpoint> out;
  try {
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node item = list[i];
      const std::string where = "endpoint " + std::to_string(i) + ": ";
      if (!item.IsMap() || !item["address"] || !item["port"]) {
        return invalid(where + "needs 'address' and 'port'");
      }
      Endpoint endpoint;
      const std::string address = item["address"].as<std::string>();
      const int port = item["port"].as<int>();
      if (address.empty() || port <= 0 || port > 65535) return invalid(where + "bad address/port");
      endpoint.address = address + ":" + std::to_string(port);
      endpoint.source.worker = item["name"] ? item["name"].as<std::string>() : address;
      if (const YAML::Node labels = item["labels"]; labels && labels.IsMap()) {
        if (labels["worker"]) endpoint.source.worker = labels["worker"].as<std::string>();
        if (labels["model"]) endpoint.model = labels["model"].as<std::string>();
        if (labels["dp_rank"]) endpoint.source.dp_rank = labels["dp_rank"].as<uint32_t>();
      }
      if (endpoint.source.worker.empty()) return invalid(where + "empty name");
      out.push_back(std::move(endpoint));
    }
  } catch (const YAML::Exception& e) {
    return invalid(std::string("bad value: ") + e.what());
  }
  return out;
}

void EndpointTable::Publish(std::vector<Endpoint> endpoints) {
  auto set = std::make_shared<EndpointSet>();
  set->endpoints = std::move(endpoints);
  set->next_of_source.assign(set->endpoints.size(), UINT32_MAX);
  for (uint32_t i = static_cast<uint32_t>(set->endpoints.size()); i-- > 0;) {
    auto [it, inserted] = set->by_source.try_emplace(set->endpoints[i].source, i);
    if (!inserted) {
      set->next_of_source[i] = it->second;
      it->second = i;
    }
  }
  MutexLock lock(&mu_);
  snapshot_ = std::move(set);
}

std::vector<Endpoint> EndpointTable::Combined() {
  std::vector<Endpoint> all = static_;
  all.insert(all.end(), from_file_.begin(), from_file_.end());
  const size_t configured = all.size();
  uint64_t announced = 0;
  for (const Endpoint& endpoint : announced_) {
    const auto first = all.begin(), last = all.begin() + static_cast<ptrdiff_t>(configured);
    if (std::any_of(first, last, [&](const Endpoint& e) { return e.source == endpoint.source; })) {
      continue;  // the static override
    }
    all.push_back(endpoint);
    ++announced;
  }
  announced_count_.store(announced, std::memory_order_relaxed);
  return all;
}

void EndpointTable::SetAnnounced(std::function<std::vector<Endpoint>()> provider,
                                 std::chrono::milliseconds refresh_interval) {
  provider_ = std::move(provider);
  refresh_interval_ = refresh_interval;
  {
    MutexLock lock(&refresh_mu_);
    next_refresh_ = std::chrono::steady_clock::now() + refresh_interval_;
  }
  RefreshAnnounced();
}

void EndpointTable::RefreshAnnounced() {
  std::vector<Endpoint> announced = provider_();
  std::vector<Endpoint> all;
  {
    MutexLock lock(&mu_);
    if (announced == announced_) return;
    announced_ = std::move(announced);
    all = Combined();
  }
  Publish(std::move(all));
}

void EndpointTable::SetStatic(std::vector<Endpoint> endpoints) {
  std::vector<Endpoint> all;
  {
    MutexLock lock(&mu_);
    static_ = std::move(endpoints);
    all = Combined();
  }
  Publish(std::move(all));
}

Status EndpointTable::Load() {
  std::ifstream in(path_);
  if (!in) return absl::NotFoundError("cannot read --endpoints-file '" + path_ + "'");
  std::stringstream text;
  text << in.rdbuf();
  KVINDEX_ASSIGN_OR_RETURN(std::vector<Endpoint> parsed, ParseEndpointsFile(text.str()));
  std::vector<Endpoint> all;
  {
    MutexLock lock(&mu_);
    from_file_ = std::move(parsed);
    all = Combined();
  }
  Publish(std::move(all));
  reloads_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

Status EndpointTable::SetFile(std::string path, std::chrono::milliseconds reload_interval) {
  path_ = std::move(path);
  reload_interval_ = reload_interval;
  {
    MutexLock lock(&reload_mu_);
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0) {
      file_mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      file_size_ = static_cast<int64_t>(st.st_size);
    }
    next_check_ = std::chrono::steady_clock::now() + reload_interval_;
  }
  return Load();
}

void EndpointTable::MaybeReload() {
  if (provider_) {
    bool due = false;
    {
      MutexLock lock(&refresh_mu_);
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_refresh_) {
        next_refresh_ = now + refresh_interval_;
        due = true;
      }
    }
    if (due) RefreshAnnounced();
  }
  if (path_.empty()) return;
  {
    MutexLock lock(&reload_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now < next_check_) return;
    next_check_ = now + reload_interval_;
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0) return;
    const int64_t mtime =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (mtime == file_mtime_ns_ && static_cast<int64_t>(st.st_size) == file_size_) return;
    file_mtime_ns_ = mtime;
    file_size_ = static_cast<int64_t>(st.st_size);
  }
  // A bad file keeps the previous endpoints.
  if (!Load().ok()) reload_errors_.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<const EndpointSet> EndpointTable::Snapshot() const {
  MutexLock lock(&mu_);
  return snapshot_;
}

}  // namespace kvindex::epp
