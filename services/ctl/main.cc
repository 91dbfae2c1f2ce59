// kvindex-ctl: the operator CLI (interfaces.md). Each command answers --help.
#include <cstdio>
#include <string_view>

#include "kvindex/version.h"

#if KVINDEX_CTL_HAVE_DECODE
#include "services/ctl/decode/decode_command.h"
#endif
#if KVINDEX_CTL_HAVE_CLIENT
#include "services/ctl/client/client_commands.h"
#endif
#if KVINDEX_CTL_HAVE_CHECKPOINT
#include "services/ctl/checkpoint/checkpoint_command.h"
#endif

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
#if KVINDEX_CTL_HAVE_DECODE
    {"decode", "decode raw engine msgpack batches and show how they normalize",
     kvindex::ctl::RunDecodeCommand},
#endif
#if KVINDEX_CTL_HAVE_CLIENT
    {"match", "ask a router which workers hold a token prefix", kvindex::ctl::RunClientCommand},
    {"state", "show a router's applied sequence, digest and entry counts",
     kvindex::ctl::RunClientCommand},
    {"workers", "list the sources a router knows", kvindex::ctl::RunClientCommand},
#endif
#if KVINDEX_CTL_HAVE_CHECKPOINT
    {"checkpoint", "inspect a RocksDB checkpoint (checkpoint inspect DIR)",
     kvindex::ctl::RunCheckpointCommand},
#endif
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "kvindex-ctl %s: operator CLI for kvindex\n\n"
               "Usage: kvindex-ctl COMMAND [options]   (COMMAND --help for options)\n\n"
               "Commands:\n",
               kvindex::kVersion);
  for (const Command& command : kCommands) {
    std::fprintf(out, "  %-11s %s\n", command.name, command.summary);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string_view first = argv[1];
  if (first == "--help" || first == "-h") {
    PrintUsage(stdout);
    return 0;
  }
  if (first == "--version") {
    std::printf("kvindex-ctl %s\n", kvindex::kVersion);
    return 0;
  }
  for (const Command& command : kCommands) {
    if (first == command.name) return command.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kvindex-ctl: unknown command '%s' (see --help)\n", argv[1]);
  return 2;
}
