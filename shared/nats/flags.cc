#include "shared/nats/flags.h"

#include "shared/base/strings.h"
#include "shared/config/cli.h"

namespace kvindex::nats {

void AddNatsFlags(CLI::App& app, NatsOptions* options) {
  app.add_option("--nats", options->url,
                 "NATS server URLs, comma-separated (nats://host:4222 or tls://host:4222)");
  app.add_option("--nats-user", options->user,
                 "NATS user; the password comes from --nats-password-file or "
                 "KVINDEX_NATS_PASSWORD");
  app.add_option("--nats-password-file", options->password_file,
                 "File whose first line is the NATS password");
  app.add_option("--nats-token-file", options->token_file,
                 "File whose first line is the NATS token (or set KVINDEX_NATS_TOKEN)");
  app.add_option("--nats-nkey-seed-file", options->nkey_seed_file,
                 "File holding the NATS user NKey seed (SU...)");
  app.add_option("--nats-creds-file", options->creds_file, "NATS .creds file (JWT + seed)");
  app.add_option("--nats-tls-ca", options->tls_ca_file, "CA bundle to verify NATS servers");
  app.add_option("--nats-tls-cert", options->tls_cert_file, "Client certificate for NATS (PEM)");
  app.add_option("--nats-tls-key", options->tls_key_file, "Client private key for NATS (PEM)");
}

void AddStreamFlags(CLI::App& app, StreamOptions* stream, StreamFlagText* text) {
  app.add_option("--stream", stream->name, "JetStream stream name")->capture_default_str();
  app.add_option("--stream-prefix", stream->subjects.prefix, "Subject prefix of the stream")
      ->capture_default_str();
  app.add_option("--stream-replicas", stream->replicas, "Stream replicas (3 for a 3-node cluster)")
      ->capture_default_str();
  app.add_option("--stream-max-age", text->max_age, "Stream retention (e.g. 24h; 0 = forever)")
      ->capture_default_str();
  app.add_option("--stream-max-bytes", stream->max_bytes,
                 "Stream size cap in bytes per replica (-1 = unlimited)")
      ->capture_default_str();
  app.add_option("--stream-duplicate-window", text->duplicate_window,
                 "Window for dropping republished events by message id")
      ->capture_default_str();
  app.add_option("--stream-storage", text->storage, "Stream storage: file or memory")
      ->check(CLI::IsMember({"file", "memory"}))
      ->capture_default_str();
}

Status FinishNatsFlags(const StreamFlagText& text, NatsOptions* options, StreamOptions* stream) {
  auto duration = [](const std::string& value, std::string_view flag,
                     std::chrono::milliseconds* out) -> Status {
    StatusOr<std::chrono::milliseconds> parsed = config::ParseDuration(value);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(strings::Cat(flag, ": ", parsed.status().message()));
    }
    *out = *parsed;
    return absl::OkStatus();
  };
  KVINDEX_RETURN_IF_ERROR(duration(text.max_age, "--stream-max-age", &stream->max_age));
  KVINDEX_RETURN_IF_ERROR(
      duration(text.duplicate_window, "--stream-duplicate-window", &stream->duplicate_window));
  if (text.storage != "file" && text.storage != "memory") {
    return absl::InvalidArgumentError(
        strings::Cat("--stream-storage: '", text.storage, "' is not file or memory"));
  }
  stream->memory_storage = text.storage == "memory";
  KVINDEX_RETURN_IF_ERROR(LoadSecrets(options));
  KVINDEX_RETURN_IF_ERROR(options->Validate());
  return stream->Validate();
}

}  // namespace kvindex::nats
