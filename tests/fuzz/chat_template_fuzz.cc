// libFuzzer target for the chat-template interpreter
// (shared/tokenize/chat_template): the input is a template source, parsed
// and, when it parses, rendered against a small chat with tight limits. Any
// outcome but a crash, a sanitizer report or a hang is fine: the interpreter
// must answer every template with a rendering or a Status.
// Build: cmake -DKVINDEX_FUZZ=ON -DKVINDEX_SANITIZE=ON with clang;
// run: build/fuzz/chat_template_fuzz
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nlohmann/json.hpp"
#include "shared/tokenize/chat_template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json* const kContext =
      new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": " sys\n"},
                 {"role": "user", "content": "héllo <think>x</think> 👍"},
                 {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5]}}}]},
                 {"role": "tool", "content": ""}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})"));
  auto tmpl = kvindex::chat_template::ChatTemplate::Parse(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!tmpl.ok()) return 0;
  kvindex::chat_template::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 100'000;
  limits.max_call_depth = 16;
  (void)tmpl->Render(*kContext, limits);
  return 0;
}
