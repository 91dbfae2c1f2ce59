#include "shared/config/subcommands.h"

#include <cstdio>
#include <string>

#include "kvindex/version.h"

namespace kvindex::config {
namespace {

void PrintUsage(FILE* out, std::string_view program, std::string_view description,
                std::span<const Subcommand> subcommands) {
  const std::string name(program);
  std::fprintf(out, "%s %s: %.*s\n\nUsage: %s COMMAND [options]   (COMMAND --help for options)\n\n",
               name.c_str(), kVersion, static_cast<int>(description.size()), description.data(),
               name.c_str());
  std::fprintf(out, "Commands:\n");
  for (const Subcommand& sub : subcommands)
    std::fprintf(out, "  %-11s %s\n", sub.name, sub.summary);
}

}  // namespace

int DispatchSubcommand(std::string_view program, std::string_view description,
                       std::span<const Subcommand> subcommands, int argc, char** argv) {
  const std::string name(program);
  if (argc < 2) {
    PrintUsage(stderr, program, description, subcommands);
    return 2;
  }
  const std::string_view first = argv[1];
  if (first == "--help" || first == "-h") {
    PrintUsage(stdout, program, description, subcommands);
    return 0;
  }
  if (first == "--version") {
    std::printf("%s %s\n", name.c_str(), kVersion);
    return 0;
  }
  for (const Subcommand& sub : subcommands) {
    if (first == sub.name) return sub.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "%s: error: unknown command '%s' (see --help)\n", name.c_str(), argv[1]);
  return 2;
}

}  // namespace kvindex::config
