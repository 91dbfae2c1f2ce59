// Test tool: renders chat templates with the C++ interpreter, for the
// exactness test (chat_template_exactness_test.py) and for people.
//
//   kvindex_chat_template_render TEMPLATE_FILE CONTEXT_JSON_FILE
//       prints the rendering; on failure the error on stderr, exit 1.
//   kvindex_chat_template_render --batch
//       reads JSON lines {"template": SOURCE, "context": {...}} on stdin and
//       writes one JSON line per case: {"ok": RENDERING} or
//       {"error": CODE, "message": TEXT} (CODE: "raised" for
//       raise_exception, "unsupported", "invalid", ...).
//   kvindex_chat_template_render --chat-batch
//       the same through RenderChat: JSON lines {"config": tokenizer_config,
//       "messages": [...], "add_generation_prompt": bool, "tools": [...] or
//       null, "extra": {...}}.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "shared/tokenize/chat_template/chat_template.h"

namespace {

using kvindex::chat_template::ChatTemplate;
using json = nlohmann::ordered_json;

kvindex::StatusOr<std::string> RenderOne(const std::string& source, const json& context) {
  auto tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(context);
}

std::string Code(const absl::Status& s) {
  if (absl::IsInvalidArgument(s) &&
      s.message().substr(0, sizeof(kvindex::chat_template::kRaisedPrefix) - 1) ==
          kvindex::chat_template::kRaisedPrefix) {
    return "raised";
  }
  if (absl::IsUnimplemented(s)) return "unsupported";
  if (absl::IsFailedPrecondition(s)) return "no-template";
  if (absl::IsInvalidArgument(s)) return "invalid";
  if (absl::IsResourceExhausted(s)) return "limit";
  return "other";
}

bool ReadFile(const char* path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool chat = argc == 2 && std::string(argv[1]) == "--chat-batch";
  if (chat || (argc == 2 && std::string(argv[1]) == "--batch")) {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      json out;
      try {
        const json c = json::parse(line);
        const nlohmann::json config =
            chat ? nlohmann::json::parse(c.at("config").dump()) : nlohmann::json();
        auto r = chat ? kvindex::chat_template::RenderChat(
                            config, c.at("messages"), c.value("add_generation_prompt", false),
                            c.value("tools", json()), c.value("extra", json::object()))
                      : RenderOne(c.at("template").get<std::string>(), c.at("context"));
        if (r.ok()) {
          out["ok"] = *r;
        } else {
          out["error"] = Code(r.status());
          out["message"] = std::string(r.status().message());
        }
      } catch (const std::exception& e) {
        out["error"] = "bad-input";
        out["message"] = e.what();
      }
      std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
    return 0;
  }
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " TEMPLATE_FILE CONTEXT_JSON_FILE | --batch\n";
    return 2;
  }
  std::string source;
  std::string context_text;
  if (!ReadFile(argv[1], source) || !ReadFile(argv[2], context_text)) {
    std::cerr << "cannot read input files\n";
    return 2;
  }
  json context;
  try {
    context = json::parse(context_text);
  } catch (const std::exception& e) {
    std::cerr << "context: " << e.what() << "\n";
    return 2;
  }
  auto r = RenderOne(source, context);
  if (!r.ok()) {
    std::cerr << r.status() << "\n";
    return 1;
  }
  std::cout << *r;
  return 0;
}
