#include "shared/nats/stream.h"

#include <memory>
#include <vector>

#include "absl/strings/str_join.h"

#include "shared/base/strings.h"
#include "shared/log/log.h"

namespace kvindex::nats {
namespace {

constexpr int64_t kNanosPerMilli = 1'000'000;

bool ContainsAuthText(std::string_view text) {
  return strings::ContainsIgnoreCase(text, "authorization violation") ||
         strings::ContainsIgnoreCase(text, "authentication") ||
         strings::ContainsIgnoreCase(text, "user authentication expired");
}

absl::StatusCode CodeFor(natsStatus s, jsErrCode code, std::string_view text) {
  switch (static_cast<int>(code)) {
    case JSStreamNotFoundErr:
      return absl::StatusCode::kNotFound;
    case JSStreamNameExistErr:
      return absl::StatusCode::kAlreadyExists;
    case JSClusterNotAvailErr:
    case JSClusterNoPeersErr:  // a peer may be restarting; retrying can succeed
      return absl::StatusCode::kUnavailable;
    case JSStreamReplicasNotUpdatableErr:
    case JSStreamReplicasNotSupportedErr:
    case JSInsufficientResourcesErr:
    case JSStreamUpdateErr:
    case JSNotEnabledErr:
    case JSNotEnabledForAccountErr:
      return absl::StatusCode::kFailedPrecondition;
    default:
      break;
  }
  switch (s) {
    case NATS_TIMEOUT:
    case NATS_NO_SERVER:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NOT_YET_CONNECTED:
    case NATS_IO_ERROR:
    case NATS_STALE_CONNECTION:
    case NATS_NO_RESPONDERS:  // JetStream not (yet) answering
    case NATS_DRAINING:
      // Auth errors surface as closed/IO errors during connect; keep them distinct.
      return ContainsAuthText(text) ? absl::StatusCode::kPermissionDenied
                                    : absl::StatusCode::kUnavailable;
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
      return absl::StatusCode::kPermissionDenied;
    case NATS_NOT_FOUND:
      return absl::StatusCode::kNotFound;
    case NATS_SSL_ERROR:
    case NATS_SECURE_CONNECTION_WANTED:
    case NATS_SECURE_CONNECTION_REQUIRED:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return ContainsAuthText(text) ? absl::StatusCode::kPermissionDenied
                                    : absl::StatusCode::kInternal;
  }
}

struct StreamInfoDeleter {
  void operator()(jsStreamInfo* info) const { jsStreamInfo_Destroy(info); }
};
using StreamInfoPtr = std::unique_ptr<jsStreamInfo, StreamInfoDeleter>;

// The wanted config; `subject` owns the string the config points to.
struct WantedConfig {
  std::string subject;
  const char* subjects[1] = {nullptr};
  jsStreamConfig config;
};

void FillConfig(const StreamOptions& options, WantedConfig* wanted) {
  wanted->subject = options.subjects.StreamSubjects();
  wanted->subjects[0] = wanted->subject.c_str();
  jsStreamConfig_Init(&wanted->config);
  jsStreamConfig& c = wanted->config;
  c.Name = options.name.c_str();
  c.Subjects = wanted->subjects;
  c.SubjectsLen = 1;
  c.Retention = js_LimitsPolicy;
  c.Discard = js_DiscardOld;
  c.Storage = options.memory_storage ? js_MemoryStorage : js_FileStorage;
  c.Replicas = options.replicas;
  c.MaxAge = options.max_age.count() * kNanosPerMilli;
  c.MaxBytes = options.max_bytes;
  c.Duplicates = options.duplicate_window.count() * kNanosPerMilli;
  c.MaxMsgSize = options.max_msg_size;
}

// The updatable fields that differ, "" when the stream is as wanted.
std::string Difference(const jsStreamConfig& have, const jsStreamConfig& want) {
  if (have.SubjectsLen != 1 || have.Subjects == nullptr ||
      std::string_view(have.Subjects[0]) != want.Subjects[0]) {
    return "subjects";
  }
  if (have.MaxAge != want.MaxAge) return "max_age";
  if (have.MaxBytes != want.MaxBytes) return "max_bytes";
  if (have.Duplicates != want.Duplicates) return "duplicate_window";
  if (have.MaxMsgSize != want.MaxMsgSize) return "max_msg_size";
  if (have.Replicas != want.Replicas) return "replicas";
  return "";
}

// Every field of `want` the existing stream does not have, with both values:
// "max_bytes (stream 1048576, flags 20000)".
std::vector<std::string> Differences(const jsStreamConfig& have, const jsStreamConfig& want) {
  std::vector<std::string> out;
  auto field = [&](std::string_view name, auto stream_value, auto wanted_value) {
    if (stream_value != wanted_value) {
      out.push_back(strings::Cat(name, " (stream ", stream_value, ", flags ", wanted_value, ")"));
    }
  };
  const std::string_view have_subject =
      have.SubjectsLen == 1 && have.Subjects != nullptr ? have.Subjects[0] : "";
  field("subjects", have_subject, std::string_view(want.Subjects[0]));
  auto storage = [](jsStorageType type) {
    return std::string_view(type == js_MemoryStorage ? "memory" : "file");
  };
  field("storage", storage(have.Storage), storage(want.Storage));
  field("max_age_ms", have.MaxAge / kNanosPerMilli, want.MaxAge / kNanosPerMilli);
  field("max_bytes", have.MaxBytes, want.MaxBytes);
  field("duplicate_window_ms", have.Duplicates / kNanosPerMilli, want.Duplicates / kNanosPerMilli);
  field("max_msg_size", have.MaxMsgSize, want.MaxMsgSize);
  field("replicas", have.Replicas, want.Replicas);
  return out;
}

bool ValidStreamName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Status FromNats(natsStatus s, std::string_view what, jsErrCode code) {
  if (s == NATS_OK) return absl::OkStatus();
  natsStatus last_status = NATS_OK;
  const char* last = nats_GetLastError(&last_status);
  const std::string_view last_text = last != nullptr ? last : "";
  std::string message = strings::Cat(what, ": ", natsStatus_GetText(s));
  if (static_cast<int>(code) != 0)
    message += strings::Cat(" (jetstream error ", static_cast<int>(code), ")");
  if (!last_text.empty() && last_text != natsStatus_GetText(s)) {
    message += strings::Cat(": ", last_text);
  }
  return Status(CodeFor(s, code, last_text), message);
}

Status StreamOptions::Validate() const {
  if (!ValidStreamName(name)) {
    return absl::InvalidArgumentError(
        strings::Cat("--stream: '", name, "' must be non-empty [A-Za-z0-9_-]"));
  }
  KVINDEX_RETURN_IF_ERROR(ValidatePrefix(subjects.prefix));
  if (replicas < 1 || replicas > 5) {
    return absl::InvalidArgumentError(
        strings::Cat("--stream-replicas: ", replicas, " is outside 1..5"));
  }
  if (max_age.count() < 0) return absl::InvalidArgumentError("--stream-max-age: negative");
  if (max_bytes < -1 || max_bytes == 0) {
    return absl::InvalidArgumentError("--stream-max-bytes: must be -1 (unlimited) or positive");
  }
  if (duplicate_window.count() < 0) {
    return absl::InvalidArgumentError("--stream-duplicate-window: negative");
  }
  // The server refuses a duplicate window longer than the retention.
  if (max_age.count() > 0 && duplicate_window > max_age) {
    return absl::InvalidArgumentError("--stream-duplicate-window: longer than --stream-max-age");
  }
  if (max_msg_size <= 0) return absl::InvalidArgumentError("max_msg_size: must be positive");
  return absl::OkStatus();
}

Status EnsureStream(jsCtx* js, const StreamOptions& options, std::vector<std::string>* mismatch) {
  KVINDEX_RETURN_IF_ERROR(options.Validate());
  if (js == nullptr) return absl::FailedPreconditionError("EnsureStream: no JetStream context");
  WantedConfig wanted;
  FillConfig(options, &wanted);
  const std::string what = strings::Cat("stream ", options.name);
  // Several processes may race: another may create the stream between our
  // lookup and our create. Each round re-reads the stream, so a few suffice.
  Status overlap;
  for (int attempt = 0; attempt < 5; ++attempt) {
    jsStreamInfo* raw_info = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&raw_info, js, options.name.c_str(), nullptr, &code);
    StreamInfoPtr info(raw_info);
    if (s == NATS_OK) {
      const jsStreamConfig& have = *info->Config;
      if (!options.owns_settings) {
        // Routers (or kvindex-ctl stream apply) own the settings: say what
        // differs, change nothing.
        std::vector<std::string> differences = Differences(have, wanted.config);
        if (!differences.empty()) {
          log::Get("nats")->warn(
              "{} differs from this process's --stream-* flags in {}; left as it is (its "
              "settings belong to the routers or kvindex-ctl stream apply)",
              what, absl::StrJoin(differences, ", "));
        }
        if (mismatch != nullptr) {
          mismatch->insert(mismatch->end(), differences.begin(), differences.end());
        }
        return absl::OkStatus();
      }
      if (have.Storage != wanted.config.Storage) {
        return absl::FailedPreconditionError(
            strings::Cat(what, " uses ", have.Storage == js_MemoryStorage ? "memory" : "file",
                         " storage; the storage kind of an existing stream cannot change"));
      }
      const std::string difference = Difference(have, wanted.config);
      if (difference.empty()) return absl::OkStatus();
      log::Get("nats")->warn("updating {} to this process's --stream-* flags: {}", what,
                             absl::StrJoin(Differences(have, wanted.config), ", "));
      jsStreamInfo* updated = nullptr;
      code = static_cast<jsErrCode>(0);
      s = js_UpdateStream(&updated, js, &wanted.config, nullptr, &code);
      StreamInfoPtr updated_holder(updated);
      if (s == NATS_OK) {
        // A standalone server "accepts" replicas > 1 but keeps 1: check the
        // answer, so a change the server did not make is not reported as done.
        const std::string left =
            updated != nullptr ? Difference(*updated->Config, wanted.config) : "";
        if (!left.empty()) {
          return absl::FailedPreconditionError(
              strings::Cat("update ", what, ": the server did not apply ", left, " (replicas now ",
                           updated->Config->Replicas, ", wanted ", options.replicas, ")"));
        }
        return absl::OkStatus();
      }
      Status status = FromNats(s, strings::Cat("update ", what, " (", difference, ")"), code);
      // A replicas change the server answers with a JetStream error (not
      // enough peers, not updatable, not clustered) needs an operator, not a
      // retry loop; transport errors stay Unavailable.
      if (have.Replicas != wanted.config.Replicas && static_cast<int>(code) != 0) {
        return absl::FailedPreconditionError(status.message());
      }
      return status;
    }
    Status status = FromNats(s, strings::Cat("look up ", what), code);
    if (!absl::IsNotFound(status)) return status;
    jsStreamInfo* created = nullptr;
    code = static_cast<jsErrCode>(0);
    s = js_AddStream(&created, js, &wanted.config, nullptr, &code);
    StreamInfoPtr created_holder(created);
    if (s == NATS_OK) {
      log::Get("nats")->info("created {} on {} (replicas {})", what, wanted.subject,
                             options.replicas);
      return absl::OkStatus();
    }
    status = FromNats(s, strings::Cat("create ", what), code);
    // "already in use": someone created it first (maybe with another config).
    // "subjects overlap" (10065): nats-server 2.9 also answers that when a
    // racing process created this very stream with a slightly other config
    // (seen with a router and an agent starting together); the next lookup
    // tells the two apart, and a real overlap with another stream is
    // returned as it was.
    if (absl::IsAlreadyExists(status) ||
        strings::ContainsIgnoreCase(std::string(status.message()), "already in use")) {
      continue;
    }
    if (strings::ContainsIgnoreCase(std::string(status.message()), "subjects overlap")) {
      overlap = status;
      continue;
    }
    return status;
  }
  if (!overlap.ok()) return overlap;
  return absl::UnavailableError(strings::Cat(what, ": kept changing while being ensured"));
}

StatusOr<StreamState> GetStreamState(jsCtx* js, const std::string& name) {
  if (js == nullptr) return absl::FailedPreconditionError("GetStreamState: no JetStream context");
  jsStreamInfo* raw_info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&raw_info, js, name.c_str(), nullptr, &code);
  StreamInfoPtr info(raw_info);
  KVINDEX_RETURN_IF_ERROR(FromNats(s, strings::Cat("stream info ", name), code));
  StreamState state;
  state.first_seq = info->State.FirstSeq;
  state.last_seq = info->State.LastSeq;
  state.messages = info->State.Msgs;
  state.bytes = info->State.Bytes;
  return state;
}

}  // namespace kvindex::nats
