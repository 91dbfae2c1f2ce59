#include "shared/config/cli.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <memory>

#include "kvindex/version.h"
#include "shared/config/yaml_config.h"

namespace kvindex::config {

void AddCommonOptions(CLI::App& app, CommonOptions* options) {
  app.add_option("--log-format", options->log_format, "Log format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", options->log_level, "Log level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.set_config("--config", "", "YAML config file (keys are flag names)")
      ->envname(EnvironmentName("--config"));
}

std::string EnvironmentName(std::string_view flag) {
  while (!flag.empty() && flag.front() == '-') flag.remove_prefix(1);
  std::string name = "KVINDEX_";
  for (char ch : flag) {
    name.push_back(ch == '-' ? '_'
                             : static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  }
  return name;
}

void BindEnvironment(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty() || !opt->get_envname().empty()) continue;
    const std::string& lname = opt->get_lnames().front();
    if (lname == "help" || lname == "version") continue;
    opt->envname(EnvironmentName(lname));
  }
  for (CLI::App* sub : app.get_subcommands({})) BindEnvironment(*sub);
}

std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  if (app.get_option_no_throw("--version") == nullptr) {
    app.set_version_flag("--version", app.get_name() + " " + kVersion);
  }
  app.config_formatter(std::make_shared<internal::YamlConfig>());
  BindEnvironment(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::printf("%s\n", (app.get_name() + " " + kVersion).c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    for (char& ch : message) {
      if (ch == '\n') ch = ' ';
    }
    std::fprintf(stderr, "%s: error: %s (see --help)\n", app.get_name().c_str(), message.c_str());
    return 2;
  }
  return std::nullopt;
}

StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  double value = 0;
  // from_chars for double is available in libstdc++ 12.
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || value < 0) {
    return absl::InvalidArgumentError("invalid duration '" + std::string(text) + "'");
  }
  const std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  double ms = 0;
  if (unit.empty() || unit == "s") {
    ms = value * 1000;
  } else if (unit == "ms") {
    ms = value;
  } else if (unit == "m") {
    ms = value * 60'000;
  } else if (unit == "h") {
    ms = value * 3'600'000;
  } else {
    return absl::InvalidArgumentError("invalid duration unit in '" + std::string(text) +
                                      "' (use ms, s, m or h)");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

}  // namespace kvindex::config
