// Command-line flags for a NATS connection and the placement stream.
//
// Every flag is also settable as KVINDEX_<FLAG> in the environment or in the
// YAML config (shared/config/cli.h). No flag takes a secret value: passwords
// and tokens come from files (--nats-password-file, --nats-token-file) or
// from KVINDEX_NATS_PASSWORD / KVINDEX_NATS_TOKEN, read by LoadSecrets.
//
//   nats::NatsOptions nats_options;
//   nats::StreamOptions stream_options;
//   nats::StreamFlagText stream_text;
//   nats::AddNatsFlags(app, &nats_options);
//   nats::AddStreamFlags(app, &stream_options, &stream_text);
//   if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
//   if (!nats_options.url.empty()) {
//     KVINDEX_RETURN_IF_ERROR(
//         nats::FinishNatsFlags(stream_text, &nats_options, &stream_options));
//   }
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "shared/base/status.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"

namespace kvindex::nats {

// Stream flags parsed after CLI11 is done (durations, storage kind).
struct StreamFlagText {
  // --stream-max-age; config::ParseDuration syntax, "0" = forever. Default: "24h".
  std::string max_age = "24h";
  // --stream-duplicate-window. Default: "2m".
  std::string duplicate_window = "2m";
  // --stream-storage: "file" or "memory". Default: "file".
  std::string storage = "file";
};

// --nats, --nats-user, --nats-password-file, --nats-token-file,
// --nats-nkey-seed-file, --nats-creds-file, --nats-tls-ca, --nats-tls-cert,
// --nats-tls-key.
void AddNatsFlags(CLI::App& app, NatsOptions* options);

// --stream, --stream-prefix, --stream-replicas, --stream-max-age,
// --stream-max-bytes, --stream-duplicate-window, --stream-storage.
void AddStreamFlags(CLI::App& app, StreamOptions* stream, StreamFlagText* text);

// After parsing: converts `text` into *stream, loads secrets into *options
// (LoadSecrets) and validates both. InvalidArgument naming the flag.
Status FinishNatsFlags(const StreamFlagText& text, NatsOptions* options, StreamOptions* stream);

}  // namespace kvindex::nats
