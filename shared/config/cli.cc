#include "shared/config/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
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

void AddCheckConfigFlag(CLI::App& app, bool* check_config) {
  app.add_flag("--check-config", *check_config,
               "Parse and validate the configuration (flags, environment, --config; secret files "
               "are read), print it with secrets masked, and exit: 0 valid, 2 invalid. Opens no "
               "socket and touches no data directory");
}

namespace {

void CollectEnvironmentNames(const CLI::App& app, std::vector<std::string>* names) {
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->get_envname().empty()) names->push_back(opt->get_envname());
  }
  for (const CLI::App* sub : app.get_subcommands({})) CollectEnvironmentNames(*sub, names);
}

// A YAML double-quoted scalar.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned char>(ch));
          out += escaped;
        } else {
          out.push_back(ch);
        }
    }
  }
  out += "\"";
  return out;
}

std::string SnakeCase(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace

std::string RedactUrlCredentials(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t scheme = text.find("://", pos);
    if (scheme == std::string_view::npos) break;
    const size_t authority = scheme + 3;
    // The userinfo ends at the last '@' of the URL: a password may hold '@'
    // or '/' (unencoded), and everything before that '@' is secret.
    size_t end = text.find_first_of(",; \t\n", authority);
    if (end == std::string_view::npos) end = text.size();
    const size_t at = text.substr(authority, end - authority).rfind('@');
    out.append(text.substr(pos, authority - pos));
    if (at != std::string_view::npos) {
      out += "***";
      out.append(text.substr(authority + at, end - authority - at));
    } else {
      out.append(text.substr(authority, end - authority));
    }
    pos = end;
  }
  out.append(text.substr(std::min(pos, text.size())));
  return out;
}

Status RefuseSecretsOnCommandLine(int argc, char** argv, const std::vector<SecretFlag>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    for (const SecretFlag& secret : flags) {
      if (arg == secret.flag || (arg.size() > secret.flag.size() && arg.starts_with(secret.flag) &&
                                 arg[secret.flag.size()] == '=')) {
        return absl::InvalidArgumentError(
            secret.flag + ": a secret on the command line shows in ps and /proc; use " +
            secret.alternative + " instead");
      }
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> UnknownEnvironment(const CLI::App& app,
                                            const std::vector<std::string>& allowed,
                                            char** environment) {
  std::vector<std::string> known = allowed;
  CollectEnvironmentNames(app, &known);
  std::vector<std::string> unknown;
  for (char** entry = environment; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view variable(*entry);
    if (variable.rfind("KVINDEX_", 0) != 0) continue;
    const std::string name(variable.substr(0, variable.find('=')));
    if (std::find(known.begin(), known.end(), name) == known.end()) unknown.push_back(name);
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

int ReportCheckedConfig(const CLI::App& app, const CheckConfigOptions& options, std::FILE* out,
                        char** environment) {
  if (environment == nullptr) environment = environ;
  const std::vector<std::string> unknown =
      UnknownEnvironment(app, options.secret_environment, environment);
  for (const std::string& name : unknown) {
    std::fprintf(stderr, "%s: error: environment variable %s sets no option (see --help)\n",
                 app.get_name().c_str(), name.c_str());
  }
  if (!unknown.empty()) return 2;

  std::fprintf(out,
               "# %s --check-config: the configuration is valid.\n"
               "# Effective values (command line > KVINDEX_* environment > --config file > "
               "default); secrets masked.\n",
               app.get_name().c_str());
  const auto is_secret = [&](const std::string& name) {
    return std::find(options.secret_options.begin(), options.secret_options.end(), name) !=
           options.secret_options.end();
  };
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty()) continue;
    const std::string& name = opt->get_lnames().front();
    if (name == "help" || name == "help-all" || name == "version" || name == "check-config") {
      continue;
    }
    const std::string key = SnakeCase(name);
    if (is_secret(name)) {
      std::fprintf(out, "# %s: %s\n", key.c_str(), opt->count() > 0 ? "set (masked)" : "not set");
      continue;
    }
    if (opt->get_expected_max() == 0) {  // a flag
      const bool on = opt->count() > 0 && opt->as<bool>();
      std::fprintf(out, "%s: %s\n", key.c_str(), on ? "true" : "false");
      continue;
    }
    std::vector<std::string> values;
    if (opt->count() > 0) {
      values = opt->results();
    } else if (!opt->get_default_str().empty()) {
      values.push_back(opt->get_default_str());
    }
    const bool many = opt->get_expected_max() > 1 || values.size() > 1;
    if (many) {
      std::fprintf(out, "%s:%s\n", key.c_str(), values.empty() ? " []" : "");
      for (const std::string& value : values) {
        std::fprintf(out, "  - %s\n", Quote(RedactUrlCredentials(value)).c_str());
      }
    } else {
      const std::string value = values.empty() ? std::string() : values.front();
      std::fprintf(out, "%s: %s\n", key.c_str(), Quote(RedactUrlCredentials(value)).c_str());
    }
  }
  for (const std::string& name : options.secret_environment) {
    const char* value = nullptr;
    for (char** entry = environment; entry != nullptr && *entry != nullptr; ++entry) {
      if (std::strncmp(*entry, name.c_str(), name.size()) == 0 && (*entry)[name.size()] == '=') {
        value = *entry + name.size() + 1;
      }
    }
    std::fprintf(out, "# environment %s: %s\n", name.c_str(),
                 value != nullptr && *value != '\0' ? "set (masked)" : "not set");
  }
  std::fflush(out);
  return 0;
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
