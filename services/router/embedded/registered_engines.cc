#include "services/router/embedded/registered_engines.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

#include "shared/base/strings.h"
#include "shared/log/log.h"
#include "shared/wire/engine_kind.h"

namespace kvindex::router {
namespace {

using query::EngineRegistration;

uint64_t WallClockNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A field that goes into --source text must not bring its own keys, nor
// control characters (log lines, metric labels).
Status CheckText(std::string_view field, std::string_view value, bool printable_only) {
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == ',' || c == '=' || byte < 0x20 || byte == 0x7f ||
        (printable_only && (byte <= 0x20 || byte > 0x7e))) {
      return absl::InvalidArgumentError(strings::Cat(
          "field '", field, "' has a character kvindex does not accept there (',', '=', ",
          printable_only ? "space, non-ASCII or " : "", "a control character)"));
    }
  }
  return absl::OkStatus();
}

Status CheckEndpoint(std::string_view field, std::string_view value) {
  if (!value.starts_with("tcp://")) {
    return absl::InvalidArgumentError(strings::Cat(
        "field '", field, "' must be a ZMQ tcp:// endpoint the engine binds (tcp://HOST:PORT)"));
  }
  return CheckText(field, value, /*printable_only=*/true);
}

std::string RegistrationId(const EngineRegistration& r) {
  return strings::Cat(r.instance_id, "|", r.tenant_id, "|", r.dp_rank);
}

nlohmann::json ToJson(const EngineRegistration& r) {
  return {{"endpoint", r.endpoint},
          {"replay_endpoint", r.replay_endpoint},
          {"type", r.type},
          {"modelname", r.model},
          {"lora_name", r.lora_name},
          {"tenant_id", r.tenant_id},
          {"instance_id", r.instance_id},
          {"block_size", r.block_size},
          {"dp_rank", r.dp_rank},
          {"additionalsalt", r.additional_salt}};
}

// An unsigned JSON integer up to `max` (nlohmann's get<uint32_t> turns -1
// into 4294967295 and a large float into undefined behaviour).
uint32_t CheckedUint(const nlohmann::json& j, const char* key, uint64_t max) {
  const nlohmann::json& value = j.at(key);
  if (!value.is_number_unsigned() || value.get<uint64_t>() > max) {
    throw std::out_of_range(strings::Cat("field '", key, "' must be an integer in 0..", max));
  }
  return static_cast<uint32_t>(value.get<uint64_t>());
}

EngineRegistration FromJson(const nlohmann::json& j) {
  EngineRegistration r;
  r.endpoint = j.at("endpoint").get<std::string>();
  r.replay_endpoint = j.at("replay_endpoint").get<std::string>();
  r.type = j.at("type").get<std::string>();
  r.model = j.at("modelname").get<std::string>();
  r.lora_name = j.at("lora_name").get<std::string>();
  r.tenant_id = j.at("tenant_id").get<std::string>();
  r.instance_id = j.at("instance_id").get<std::string>();
  r.block_size = CheckedUint(j, "block_size", UINT32_MAX);
  r.dp_rank = CheckedUint(j, "dp_rank", ingest::kMaxDpRanks - 1);
  r.additional_salt = j.at("additionalsalt").get<std::string>();
  return r;
}

// Largest registrations file read back: max_registrations entries of
// bounded fields are far below it.
constexpr uintmax_t kMaxSavedBytes = 16 << 20;

// The registrations saved in `path`; a missing file = none. An entry that
// does not read back (wrong type, integer out of range) is logged and
// skipped; a file that does not parse is an error.
StatusOr<std::vector<EngineRegistration>> ReadSaved(const std::string& path) {
  std::vector<EngineRegistration> saved;
  if (path.empty()) return saved;
  try {
    if (!std::filesystem::exists(path)) return saved;
    if (const uintmax_t size = std::filesystem::file_size(path); size > kMaxSavedBytes) {
      return absl::DataLossError(strings::Cat("registrations file '", path, "': ", size,
                                              " bytes, more than ", kMaxSavedBytes));
    }
    std::ifstream in(path);
    const nlohmann::json j = nlohmann::json::parse(in);
    size_t index = 0;
    for (const nlohmann::json& entry : j.at("registrations")) {
      try {
        saved.push_back(FromJson(entry));
      } catch (const std::exception& error) {
        log::Get("router")->error("registrations file '{}': entry {} skipped: {}", path, index,
                                  error.what());
      }
      ++index;
    }
  } catch (const std::exception& error) {
    return absl::DataLossError(strings::Cat("registrations file '", path, "': ", error.what()));
  }
  return saved;
}

}  // namespace

RegisteredEngines::RegisteredEngines(RegisteredEnginesOptions options, InProcessSink* sink,
                                     prometheus::Registry* registry)
    : options_(std::move(options)), sink_(sink), registry_(registry) {}

RegisteredEngines::~RegisteredEngines() { Stop(); }

Status RegisteredEngines::Start() {
  Status status = absl::OkStatus();
  {
    MutexLock change(&change_mu_);
    stopping_ = false;
    auto logger = log::Get("router");
    StatusOr<std::vector<EngineRegistration>> saved = ReadSaved(options_.state_file);
    if (!saved.ok()) {
      // Not fatal: the engines can be registered again. The file stays as it
      // is until the next registration replaces it.
      logger->error("{}: no registered engine followed", saved.status().ToString());
      saved = std::vector<EngineRegistration>();
    }
    for (const EngineRegistration& r : *saved) {
      const Key key{r.instance_id, r.dp_rank};
      {
        MutexLock lock(&mu_);
        if (entries_.count(key) != 0 || pending_.count(key) != 0) {
          logger->error("registration {} saved twice: the second one skipped", RegistrationId(r));
          continue;
        }
      }
      if (Status s = StartOne(r, /*persist=*/false); !s.ok()) {
        // Kept (in the file too) and retried: the reason may pass (an engine
        // or a limit), a registration is never lost to it.
        logger->error("registration {} not started, kept and retried every {} ms: {}",
                      RegistrationId(r), options_.retry_interval.count(), s.ToString());
        MutexLock lock(&mu_);
        pending_[key] = Pending{r, s.ToString()};
      }
    }
    std::vector<PlacementEvent> clears;
    {
      MutexLock lock(&mu_);
      if (!saved->empty()) {
        logger->info("{} registered engine(s) restored from '{}', {} pending", entries_.size(),
                     options_.state_file, pending_.size());
      }
      // A pending instance's entries (a checkpoint's) leave the index: it is
      // not followed until it starts (and then starts cleared).
      // Not an instance a --source now follows: those entries are its.
      for (const auto& [key, pending] : pending_) {
        const std::string& instance = key.first;  // (a lambda cannot name a binding)
        if (std::any_of(options_.configured.begin(), options_.configured.end(),
                        [&](const ingest::SourceSpec& c) { return c.worker == instance; })) {
          continue;
        }
        for (PlacementEvent& clear :
             ClearsFor(key.first, key.second, NodeOf(pending.registration))) {
          clears.push_back(std::move(clear));
        }
      }
      // Rewritten without the entries that did not read back.
      if (!saved->empty()) status = Save();
    }
    if (Status s = clears.empty() ? Status() : sink_->Publish(clears); !s.ok()) {
      logger->warn("pending registrations: clear not published: {}", s.ToString());
    }
  }
  retry_stop_.Reset();
  if (!retry_thread_.joinable()) {
    retry_thread_ = std::thread([this] {
      while (!retry_stop_.WaitFor(options_.retry_interval)) RetryPending();
    });
  }
  return status;
}

void RegisteredEngines::RetryPending() {
  MutexLock change(&change_mu_);
  if (stopping_) return;
  std::vector<EngineRegistration> todo;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, pending] : pending_) todo.push_back(pending.registration);
  }
  for (const EngineRegistration& r : todo) {
    const Status s = StartOne(r, /*persist=*/false);
    MutexLock lock(&mu_);
    auto it = pending_.find(Key{r.instance_id, r.dp_rank});
    if (it == pending_.end()) continue;
    if (s.ok()) {
      pending_.erase(it);
    } else if (s.ToString() != it->second.error) {
      log::Get("router")->warn("registration {} still pending: {}", RegistrationId(r),
                               s.ToString());
      it->second.error = s.ToString();
    }
  }
}

void RegisteredEngines::SetBridgeWorkers(std::function<bool(const std::string&)> in_use) {
  MutexLock lock(&mu_);
  bridge_workers_ = std::move(in_use);
}

std::string RegisteredEngines::NodeOf(const EngineRegistration& r) const {
  return strings::Cat(options_.base.node, "/register/", r.instance_id, "/", r.dp_rank);
}

std::vector<std::string> RegisteredEngines::SavedInstances() const {
  std::vector<std::string> out;
  StatusOr<std::vector<EngineRegistration>> saved = ReadSaved(options_.state_file);
  if (saved.ok()) {
    for (const EngineRegistration& r : *saved) out.push_back(r.instance_id);
  }
  return out;
}

void RegisteredEngines::Stop() {
  retry_stop_.Raise();
  if (retry_thread_.joinable()) retry_thread_.join();
  MutexLock change(&change_mu_);
  stopping_ = true;
  std::map<Key, Entry> stopped;
  {
    MutexLock lock(&mu_);
    stopped.swap(entries_);
    pending_.clear();  // the file keeps them
  }
  for (auto& [key, entry] : stopped) entry.pipeline->Stop();
}

StatusOr<ingest::SourceSpec> RegisteredEngines::Validate(const EngineRegistration& r) const {
  const std::string type = Lower(r.type);
  if (type == "mooncake") {
    return absl::InvalidArgumentError(
        "type 'Mooncake' (mooncake_master's RFC #1527 events) is not decoded by kvindex: register "
        "the engines' own vLLM or SGLang KV-event publishers");
  }
  const std::optional<wire::EngineKind> engine = wire::EngineKindFromName(type);
  if (!engine.has_value()) {
    return absl::InvalidArgumentError(
        strings::Cat("field 'type' must be vLLM or SGLang (got '", r.type, "')"));
  }
  KVINDEX_RETURN_IF_ERROR(CheckEndpoint("endpoint", r.endpoint));
  if (!r.replay_endpoint.empty()) {
    KVINDEX_RETURN_IF_ERROR(CheckEndpoint("replay_endpoint", r.replay_endpoint));
  }
  KVINDEX_RETURN_IF_ERROR(CheckText("instance_id", r.instance_id, /*printable_only=*/true));
  KVINDEX_RETURN_IF_ERROR(CheckText("modelname", r.model, /*printable_only=*/false));
  KVINDEX_RETURN_IF_ERROR(CheckText("tenant_id", r.tenant_id, /*printable_only=*/false));
  KVINDEX_RETURN_IF_ERROR(CheckText("lora_name", r.lora_name, /*printable_only=*/false));
  KVINDEX_RETURN_IF_ERROR(CheckText("additionalsalt", r.additional_salt, false));
  // The same checks as --source.
  std::string text = strings::Cat(
      "worker=", r.instance_id, ",engine=", wire::EngineKindName(*engine), ",model=", r.model,
      ",block_size=", r.block_size, ",pub=", r.endpoint, ",dp_rank=", r.dp_rank);
  if (!r.replay_endpoint.empty()) text += ",replay=" + r.replay_endpoint;
  StatusOr<std::vector<ingest::SourceSpec>> specs = ingest::ParseSourceSpec(text);
  if (!specs.ok()) {
    return absl::InvalidArgumentError(strings::Cat("registration: ", specs.status().message()));
  }
  if (specs->size() != 1) return absl::InvalidArgumentError("registration: one rank expected");
  ingest::SourceSpec spec = std::move(specs->front());

  if (bridge_workers_ && bridge_workers_(r.instance_id)) {
    return absl::AlreadyExistsError(
        strings::Cat("instance '", r.instance_id,
                     "' is a worker_id the SGLang bridge (--sglang-ingest) feeds; it cannot be "
                     "registered"));
  }
  for (const ingest::SourceSpec& c : options_.configured) {
    if (c.worker == r.instance_id) {
      return absl::AlreadyExistsError(strings::Cat(
          "instance '", r.instance_id, "' is followed through --source; it cannot be registered"));
    }
    if (c.pub_endpoint == spec.pub_endpoint) {
      return absl::AlreadyExistsError(
          strings::Cat("endpoint ", r.endpoint, " is followed through --source"));
    }
  }
  std::optional<uint32_t> known;
  if (options_.model_block_size) known = options_.model_block_size(r.model);
  for (const auto& [key, entry] : entries_) {
    if (entry.spec.pub_endpoint == spec.pub_endpoint && key != Key{r.instance_id, r.dp_rank}) {
      return absl::AlreadyExistsError(strings::Cat("endpoint ", r.endpoint,
                                                   " is registered for instance '",
                                                   entry.registration.instance_id, "'"));
    }
    if (entry.spec.model == spec.model && !known.has_value()) known = entry.spec.block_size;
  }
  for (const auto& [key, pending] : pending_) {
    if (pending.registration.endpoint == r.endpoint && key != Key{r.instance_id, r.dp_rank}) {
      return absl::AlreadyExistsError(strings::Cat(
          "endpoint ", r.endpoint, " is registered (pending) for instance '", key.first, "'"));
    }
  }
  if (known.has_value() && *known != spec.block_size) {
    return absl::InvalidArgumentError(strings::Cat("block_size ", spec.block_size,
                                                   " is not the block size of '", r.model, "' (",
                                                   *known, "): a model has one block size"));
  }
  return spec;
}

Status RegisteredEngines::StartOne(const EngineRegistration& registration, bool persist) {
  const Key key{registration.instance_id, registration.dp_rank};
  ingest::SourceSpec spec;
  {
    MutexLock lock(&mu_);
    StatusOr<ingest::SourceSpec> valid = Validate(registration);
    if (!valid.ok()) return valid.status();
    spec = *std::move(valid);
    if (entries_.size() >= options_.max_registrations) {
      return absl::ResourceExhaustedError(
          strings::Cat("already ", entries_.size(), " registered engines (--max-registrations ",
                       options_.max_registrations, "): unregister one first"));
    }
    // Claimed (Follows says so) before the pipeline publishes: the bridge
    // checks Follows after claiming its worker, this side checked the bridge
    // above, in the same critical section as the claim.
    starting_.insert(key);
  }
  Entry entry;
  entry.registration = registration;
  entry.spec = spec;
  entry.node = NodeOf(registration);
  ingest::AgentOptions agent = options_.base;
  agent.node = entry.node;
  agent.sources = {spec};
  entry.pipeline = std::make_unique<ingest::AgentPipeline>(std::move(agent), sink_, registry_);
  if (Status s = entry.pipeline->Start(); !s.ok()) {
    MutexLock lock(&mu_);
    starting_.erase(key);
    return s;
  }
  Status saved = absl::OkStatus();
  Entry removed;
  std::vector<PlacementEvent> clears;
  {
    MutexLock lock(&mu_);
    starting_.erase(key);
    auto [it, inserted] = entries_.emplace(key, std::move(entry));
    if (persist) saved = Save();
    if (!saved.ok()) {
      clears = ClearsFor(key.first, key.second, it->second.node);
      removed = std::move(it->second);
      entries_.erase(it);
    }
  }
  if (!saved.ok()) {
    // Fail closed: not followed rather than followed until the next restart.
    StopAndPublish(removed, clears);
    return absl::UnavailableError(strings::Cat("cannot save the registration: ", saved.message()));
  }
  log::Get("router")->info("registered engine {} ({}, {})", RegistrationId(registration),
                           registration.endpoint, registration.model);
  return absl::OkStatus();
}

Status RegisteredEngines::Register(const EngineRegistration& registration, bool* created) {
  MutexLock change(&change_mu_);
  *created = false;
  if (stopping_) return absl::UnavailableError("the router is stopping");
  if (options_.max_registrations == 0) {
    return absl::ResourceExhaustedError(
        "registration is off on this router (--max-registrations 0): use --source");
  }
  const Key key{registration.instance_id, registration.dp_rank};
  bool pending = false;
  {
    MutexLock lock(&mu_);
    const EngineRegistration* taken = nullptr;
    if (auto it = entries_.find(key); it != entries_.end()) {
      if (it->second.registration == registration) return absl::OkStatus();  // idempotent
      taken = &it->second.registration;
    } else if (auto p = pending_.find(key); p != pending_.end()) {
      pending = p->second.registration == registration;  // tried again now
      if (!pending) taken = &p->second.registration;
    }
    if (taken != nullptr) {
      return absl::AlreadyExistsError(
          strings::Cat("instance '", registration.instance_id, "' rank ", registration.dp_rank,
                       " is registered with other fields (", taken->endpoint, ", ", taken->model,
                       "): unregister it first"));
    }
  }
  // A pending registration is in the file already.
  const Status started = StartOne(registration, /*persist=*/!pending);
  if (pending) {
    MutexLock lock(&mu_);
    if (started.ok()) {
      pending_.erase(key);
    } else {
      pending_[key].error = started.ToString();
    }
  }
  KVINDEX_RETURN_IF_ERROR(started);
  *created = true;
  return absl::OkStatus();
}

std::vector<PlacementEvent> RegisteredEngines::ClearsFor(const std::string& instance,
                                                         uint32_t dp_rank,
                                                         const std::string& node) const {
  // The ranks this source's envelopes could name (SourceSpec::dp_rank_limit:
  // 0..dp_rank), less those another registration of the instance serves.
  std::vector<PlacementEvent> clears;
  const uint64_t now = WallClockNs();
  // Validate bounds dp_rank below kMaxDpRanks; the min keeps the loop finite
  // whatever reached the entry.
  const uint32_t last = std::min(dp_rank, ingest::kMaxDpRanks - 1);
  for (uint32_t rank = 0; rank <= last; ++rank) {
    const Key other{instance, rank};
    if (rank != dp_rank && entries_.count(other) != 0) continue;
    PlacementEvent& clear = clears.emplace_back();
    clear.kind = PlacementKind::kCleared;  // empty model: every model
    clear.source = SourceKey{instance, rank};
    clear.agent = node;
    clear.event_id = now + rank;
    clear.timestamp_ns = now;
  }
  return clears;
}

void RegisteredEngines::StopAndPublish(Entry& entry, const std::vector<PlacementEvent>& clears) {
  entry.pipeline->Stop();
  // Without mu_: Publish waits while the in-process log is full.
  if (Status s = sink_->Publish(clears); !s.ok()) {
    log::Get("router")->warn("unregister {}: clear not published: {}",
                             RegistrationId(entry.registration), s.ToString());
  }
}

Status RegisteredEngines::Unregister(const std::string& instance_id,
                                     std::optional<uint32_t> dp_rank,
                                     std::vector<std::string>* removed) {
  MutexLock change(&change_mu_);
  if (stopping_) return absl::UnavailableError("the router is stopping");
  std::vector<std::pair<Entry, std::vector<PlacementEvent>>> stopped;
  Status saved = absl::OkStatus();
  bool unpended = false;
  {
    MutexLock lock(&mu_);
    std::vector<std::map<Key, Entry>::iterator> found;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first.first == instance_id && (!dp_rank || it->first.second == *dp_rank)) {
        found.push_back(it);
      }
    }
    // Pending ones: no pipeline, their entries were cleared at Start.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->first.first == instance_id && (!dp_rank || it->first.second == *dp_rank)) {
        removed->push_back(RegistrationId(it->second.registration));
        it = pending_.erase(it);
        unpended = true;
      } else {
        ++it;
      }
    }
    if (found.empty() && !unpended) {
      for (const ingest::SourceSpec& c : options_.configured) {
        if (c.worker == instance_id) {
          return absl::FailedPreconditionError(
              strings::Cat("instance '", instance_id,
                           "' is followed through --source: restart the router without it"));
        }
      }
      return absl::NotFoundError(strings::Cat("no engine registered as instance '", instance_id,
                                              "'",
                                              dp_rank ? strings::Cat(" rank ", *dp_rank) : ""));
    }
    for (auto it : found) removed->push_back(RegistrationId(it->second.registration));
    // Highest rank first: a lower rank still registered clears itself after.
    std::reverse(found.begin(), found.end());
    for (auto it : found) {
      std::vector<PlacementEvent> clears =
          ClearsFor(it->first.first, it->first.second, it->second.node);
      stopped.emplace_back(std::move(it->second), std::move(clears));
      entries_.erase(it);
    }
    saved = Save();
  }
  for (auto& [entry, clears] : stopped) StopAndPublish(entry, clears);
  log::Get("router")->info("unregistered {} engine(s) of instance {}", removed->size(),
                           instance_id);
  if (!saved.ok()) {
    return absl::UnavailableError(
        strings::Cat("stopped, but the registrations file was not updated: ", saved.message()));
  }
  return absl::OkStatus();
}

std::vector<EngineRegistration> RegisteredEngines::Registered() const {
  MutexLock lock(&mu_);
  std::map<Key, const EngineRegistration*> all;
  for (const auto& [key, entry] : entries_) all[key] = &entry.registration;
  for (const auto& [key, pending] : pending_) all[key] = &pending.registration;
  std::vector<EngineRegistration> out;
  out.reserve(all.size());
  for (const auto& [key, registration] : all) out.push_back(*registration);
  return out;
}

std::vector<IngestSourceStatus> RegisteredEngines::Sources() const {
  MutexLock lock(&mu_);
  std::vector<IngestSourceStatus> out;
  for (const auto& [key, entry] : entries_) {
    for (IngestSourceStatus& s : entry.pipeline->Sources()) out.push_back(std::move(s));
  }
  return out;
}

bool RegisteredEngines::Ready() const {
  MutexLock lock(&mu_);
  for (const auto& [key, entry] : entries_) {
    if (!entry.pipeline->Ready()) return false;
  }
  return true;
}

size_t RegisteredEngines::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

bool RegisteredEngines::Follows(const std::string& instance) const {
  for (const ingest::SourceSpec& c : options_.configured) {
    if (c.worker == instance) return true;
  }
  MutexLock lock(&mu_);
  auto it = entries_.lower_bound(Key{instance, 0});
  if (it != entries_.end() && it->first.first == instance) return true;
  auto p = pending_.lower_bound(Key{instance, 0});
  if (p != pending_.end() && p->first.first == instance) return true;
  auto s = starting_.lower_bound(Key{instance, 0});
  return s != starting_.end() && s->first == instance;
}

Status RegisteredEngines::Save() const {
  if (options_.state_file.empty()) return absl::OkStatus();
  std::map<Key, const EngineRegistration*> all;  // running and pending
  for (const auto& [key, entry] : entries_) all[key] = &entry.registration;
  for (const auto& [key, pending] : pending_) all[key] = &pending.registration;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [key, registration] : all) list.push_back(ToJson(*registration));
  const std::string text = nlohmann::json{{"registrations", list}}.dump(2) + "\n";
  const std::string temporary = options_.state_file + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    return absl::UnavailableError(strings::Cat("cannot write '", temporary, "'"));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size() &&
                       std::fflush(file) == 0 && ::fsync(fileno(file)) == 0;
  const bool closed = std::fclose(file) == 0;
  std::error_code ec;
  if (written && closed) std::filesystem::rename(temporary, options_.state_file, ec);
  if (!written || !closed || ec) {
    std::filesystem::remove(temporary, ec);
    return absl::UnavailableError(strings::Cat("cannot write '", options_.state_file, "'"));
  }
  // The rename is durable once the directory entry is. The file already
  // says the new list: a failure here is logged, not returned (returning
  // would stop a registration the file keeps).
  std::filesystem::path directory = std::filesystem::path(options_.state_file).parent_path();
  if (directory.empty()) directory = ".";
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!synced) {
    log::Get("router")->warn(
        "registrations file '{}': directory not synced, the last change "
        "may not survive a power loss",
        options_.state_file);
  }
  return absl::OkStatus();
}

}  // namespace kvindex::router
