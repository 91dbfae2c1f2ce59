#include "shared/config/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

namespace kvindex::config::internal {
namespace {

std::string FlagName(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

void Flatten(const YAML::Node& node, std::vector<std::string>& parents,
             std::vector<CLI::ConfigItem>& out) {
  for (const auto& entry : node) {
    const std::string name = FlagName(entry.first.as<std::string>());
    const YAML::Node& value = entry.second;
    CLI::ConfigItem item;
    item.parents = parents;
    item.name = name;
    if (value.IsMap()) {
      parents.push_back(name);
      Flatten(value, parents, out);
      parents.pop_back();
      continue;
    }
    if (value.IsSequence()) {
      for (const auto& element : value) item.inputs.push_back(element.as<std::string>());
    } else if (value.IsNull()) {
      continue;
    } else {
      item.inputs.push_back(value.as<std::string>());
    }
    out.push_back(std::move(item));
  }
}

}  // namespace

std::string YamlConfig::to_config(const CLI::App* app, bool default_also,
                                  bool /*write_description*/, std::string /*prefix*/) const {
  YAML::Emitter emitter;
  emitter << YAML::BeginMap;
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
    std::string value = opt->reduced_results().empty() ? "" : opt->reduced_results().front();
    if (value.empty() && default_also) value = opt->get_default_str();
    if (value.empty()) continue;
    emitter << YAML::Key << opt->get_lnames().front() << YAML::Value << value;
  }
  emitter << YAML::EndMap;
  return std::string(emitter.c_str()) + "\n";
}

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& input) const {
  std::vector<CLI::ConfigItem> items;
  YAML::Node root;
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    throw CLI::ParseError("config file is not valid YAML: " + std::string(e.what()),
                          CLI::ExitCodes::ConfigError);
  }
  if (root.IsNull()) return items;
  if (!root.IsMap()) {
    throw CLI::ParseError("config file must be a YAML map of flag names to values",
                          CLI::ExitCodes::ConfigError);
  }
  std::vector<std::string> parents;
  try {
    Flatten(root, parents, items);
  } catch (const YAML::Exception& e) {
    throw CLI::ParseError("config file: " + std::string(e.what()), CLI::ExitCodes::ConfigError);
  }
  return items;
}

}  // namespace kvindex::config::internal
