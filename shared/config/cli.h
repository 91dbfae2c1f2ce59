// Command-line, environment and config-file options for every kvindex binary.
//
// One mechanism, three sources, in increasing priority: a YAML config file
// (--config FILE; keys are the flag names, snake_case or kebab-case), the
// environment (every flag --foo-bar is also KVINDEX_FOO_BAR), and the command
// line. Bad flags produce one line on stderr and exit code 2.
//
//   CLI::App app{"kvindex-agent: ...", "kvindex-agent"};
//   config::CommonOptions common;
//   config::AddCommonOptions(app, &common);
//   app.add_option("--node", options.node, "Node id");
//   if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::config {

struct CommonOptions {
  // "text" or "json" (one JSON object per line). Default: text.
  std::string log_format = "text";
  // trace, debug, info, warn, error, critical, off. Default: info.
  std::string log_level = "info";
};

// Adds --config, --log-format and --log-level.
void AddCommonOptions(CLI::App& app, CommonOptions* options);

// Gives every option that has a long name and no environment variable yet the
// variable KVINDEX_<NAME_IN_UPPER_SNAKE> (subcommands included). Parse calls it.
void BindEnvironment(CLI::App& app);

// The environment variable name for a flag: "--data-dir" -> "KVINDEX_DATA_DIR".
std::string EnvironmentName(std::string_view flag);

// Adds --version, binds the environment, installs the YAML config reader and
// parses. Returns an exit code when the program should stop (0 after --help or
// --version, 2 after a bad flag, with a one-line error on stderr); nullopt to
// continue.
std::optional<int> Parse(CLI::App& app, int argc, char** argv);

// Parses a human duration: "250ms", "10s", "5m", "1h", or a bare number of
// seconds. InvalidArgument names the offending text.
StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);

// --check-config: parse the whole configuration (flags, KVINDEX_*
// environment, --config YAML), run the validation the binary runs before it
// starts (secret files are read to check they are readable), then print the
// effective configuration with secrets masked and exit instead of starting:
// 0 when valid, 2 when not. No socket is opened and no data is touched.
//
//   bool check_config = false;
//   config::AddCheckConfigFlag(app, &check_config);
//   if (auto exit_code = config::Parse(app, argc, argv)) return *exit_code;
//   ... the binary's own validation: return 2 on failure ...
//   if (check_config) return config::ReportCheckedConfig(app, {{"auth-token"}, {}}, stdout);
void AddCheckConfigFlag(CLI::App& app, bool* check_config);

struct CheckConfigOptions {
  // Long option names (without dashes) whose values are secrets: printed as
  // "set (masked)" or "not set", never the value.
  std::vector<std::string> secret_options;
  // Environment variables read directly as secrets (not options), e.g.
  // KVINDEX_NATS_PASSWORD: reported as set or not, never the value.
  std::vector<std::string> secret_environment;
};

// KVINDEX_* variables in `environment` (NAME=value entries, null-terminated,
// like environ) that set no option of `app` and are not in `allowed`: a
// misspelt or renamed variable is otherwise ignored without a word.
std::vector<std::string> UnknownEnvironment(const CLI::App& app,
                                            const std::vector<std::string>& allowed,
                                            char** environment);

// Writes the effective value of every option of `app` to `out`, one YAML key
// per option (snake_case, the --config syntax), secrets masked, credentials
// in URLs (scheme://user:password@host) redacted. Returns 0, or 2 (with one
// line on stderr per variable) when UnknownEnvironment finds any.
int ReportCheckedConfig(const CLI::App& app, const CheckConfigOptions& options, std::FILE* out,
                        char** environment = nullptr);

// "nats://user:secret@host:4222,nats://h2:4222" -> "nats://***@host:4222,nats://h2:4222".
// Everything before the last '@' of each URL is redacted (a password may hold
// '@' or '/').
std::string RedactUrlCredentials(std::string_view text);

// A flag whose value is a secret, and where the secret should come from instead.
struct SecretFlag {
  std::string flag;         // "--auth-token"
  std::string alternative;  // "--auth-token-file FILE or KVINDEX_AUTH_TOKEN"
};

// Secrets come only from files or the environment: a command line shows in
// `ps` and /proc to every local user. InvalidArgument naming the flag and its
// alternative when argv sets one of `flags` ("--auth-token X" or
// "--auth-token=X"); the same option set through KVINDEX_* or --config is
// fine. Call after Parse, before anything starts.
Status RefuseSecretsOnCommandLine(int argc, char** argv, const std::vector<SecretFlag>& flags);

}  // namespace kvindex::config
