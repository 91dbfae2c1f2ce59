// vLLM's preprocessing of chat messages and tools before the chat template
// (vllm/entrypoints/chat_utils.py parse_chat_messages, _postprocess_messages;
// serving_chat: tools as pydantic's model_dump), so the template sees what it
// sees under vLLM:
//
// - content: null -> no parts; a string -> one text part; parts of type
//   text / input_text / output_text / refusal / thinking (or bare strings)
//   give their text, tool_reference its name; a text or refusal part whose
//   value is null is skipped. "string" format (the template does not loop
//   over content): the non-empty texts joined with "\n"; "openai" format:
//   a list of {"type": "text", "text": ...} parts. Image, audio, video and
//   embedding parts: Unimplemented (multimodal prompts go to the render
//   endpoint).
// - assistant: tool_calls kept unless null, dropped when empty; each call's
//   function.arguments parsed from its JSON string (invalid JSON, null or a
//   scalar other than a JSON string -> {}); "reasoning" copied to
//   "reasoning" and "reasoning_content".
// - tool: tool_call_id kept; list content of text parts joined with "\n".
// - name (a string) and task (a string) kept, developer's tools kept; every
//   other key of a message dropped. Keys in vLLM's order: role, content,
//   tool_calls, reasoning, reasoning_content / tool_call_id, name, task,
//   tools.
// - tools: {"type": "function", "function": {"name", "description",
//   "parameters", ...further keys as sent}, ...further keys as sent}, with
//   description and parameters null when absent (pydantic's model_dump of
//   vLLM's ChatCompletionToolsParam).
//
// InvalidArgument where vLLM answers 400 (no role, a part without type, an
// unknown part type, wrong JSON types).
#pragma once

#include "nlohmann/json.hpp"
#include "shared/base/status.h"

namespace kvindex::tokenize {

enum class ContentFormat { kString, kOpenAi };

StatusOr<nlohmann::ordered_json> PrepareMessages(const nlohmann::ordered_json& messages,
                                                 ContentFormat format);

// null stays null.
StatusOr<nlohmann::ordered_json> PrepareTools(const nlohmann::ordered_json& tools);

}  // namespace kvindex::tokenize
