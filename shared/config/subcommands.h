// Dispatch for binaries made of subcommands (kvindex-ctl, kvindex-bench):
// `PROGRAM SUBCOMMAND [options]`, with --help listing the subcommands and
// --version answering for the whole binary. Each subcommand parses its own
// flags (config::Parse) from argv[0] = its name.
#pragma once

#include <span>
#include <string_view>

namespace kvindex::config {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

// Returns the exit code: the subcommand's, 0 for --help/--version, 2 for a
// missing or unknown subcommand (with a one-line error).
int DispatchSubcommand(std::string_view program, std::string_view description,
                       std::span<const Subcommand> subcommands, int argc, char** argv);

}  // namespace kvindex::config
