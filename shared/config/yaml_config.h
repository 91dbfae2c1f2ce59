// YamlConfig: lets CLI11 read --config files written in YAML.
//
// Top-level scalar keys set the flag of the same name (underscores and dashes
// are interchangeable), sequences give repeated values (e.g. several
// `source:` entries), and nested maps address subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <vector>

namespace kvindex::config::internal {

class YamlConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

}  // namespace kvindex::config::internal
