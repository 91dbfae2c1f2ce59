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
#include <optional>
#include <string>

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

}  // namespace kvindex::config
